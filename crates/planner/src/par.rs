//! CPU parallelism for independent pure work (no I/O).

/// `items.iter().map(f)`, spread over the machine's cores, order kept. Key generation and
/// rendering are independent per cluster or component and dominate their passes.
pub(crate) fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(results) => results,
                // A panic in a worker is a bug; surface it as the panic it was.
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// [`parallel_map`] over owned items: `items.into_iter().map(f)`, spread over the cores,
/// order kept.
pub(crate) fn parallel_map_owned<T: Send, R: Send>(
    items: Vec<T>,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let mut parts: Vec<Vec<T>> = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        parts.push(items.by_ref().take(chunk).collect());
    }
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| scope.spawn(move || part.into_iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(results) => results,
                // A panic in a worker is a bug; surface it as the panic it was.
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::{parallel_map, parallel_map_owned};

    #[test]
    fn keeps_order_and_covers_every_item() {
        let items: Vec<u32> = (0..1001).collect();
        let out = parallel_map(&items, |i| i * 2);
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(parallel_map(&[] as &[u32], |i| *i), Vec::<u32>::new());
        let owned = parallel_map_owned(items.clone(), |i| i * 3);
        assert_eq!(owned, items.iter().map(|i| i * 3).collect::<Vec<_>>());
        assert_eq!(
            parallel_map_owned(Vec::<u32>::new(), |i| i),
            Vec::<u32>::new()
        );
    }
}
