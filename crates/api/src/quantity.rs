//! Kubernetes resource quantities, as hypervisor capacities are written: CPU in cores or
//! millicores (`4`, `1.5`, `3500m`), memory in bytes with a decimal or binary suffix
//! (`8Gi`, `512Mi`, `2G`, `1000000`).

/// CPU as millicores.
///
/// # Errors
///
/// What is wrong, in words.
pub fn parse_cpu_millis(value: &str) -> Result<u64, String> {
    let v = value.trim();
    if let Some(m) = v.strip_suffix('m') {
        return m
            .parse::<u64>()
            .map_err(|_| format!("{value:?} is not a CPU quantity (e.g. 4, 1.5, 3500m)"));
    }
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !(frac.is_empty() || digits(frac)) || frac.len() > 3 {
        return Err(format!(
            "{value:?} is not a CPU quantity (e.g. 4, 1.5, 3500m; at most 3 decimals)"
        ));
    }
    let whole: u64 = whole
        .parse()
        .map_err(|_| format!("{value:?} is too large"))?;
    let frac: u64 = format!("{frac:0<3}").parse().unwrap_or(0);
    whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(frac))
        .ok_or_else(|| format!("{value:?} is too large"))
}

/// Memory as bytes.
///
/// # Errors
///
/// What is wrong, in words.
pub fn parse_memory_bytes(value: &str) -> Result<u64, String> {
    let v = value.trim();
    const SUFFIXES: [(&str, u64); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(s, f)| v.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((v, 1));
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{value:?} is not a memory quantity (e.g. 8Gi, 512Mi, 2G, or bytes)"
        ));
    }
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{value:?} is too large"))
}

/// Millicores for people: `650m`, `2`, `1.5`.
pub fn format_cpu(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        format!("{}", millis / 1000)
    } else if millis > 1000 {
        format!("{}", millis as f64 / 1000.0)
    } else {
        format!("{millis}m")
    }
}

/// Bytes for people, in the largest binary unit that divides them (`960Mi`, `8Gi`).
pub fn format_memory(bytes: u64) -> String {
    for (suffix, factor) in [
        ("Ti", 1u64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{}{suffix}", bytes / factor);
        }
    }
    if bytes >= 1 << 20 {
        return format!("{:.1}Mi", bytes as f64 / f64::from(1u32 << 20));
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu() {
        assert_eq!(parse_cpu_millis("4"), Ok(4000));
        assert_eq!(parse_cpu_millis("1.5"), Ok(1500));
        assert_eq!(parse_cpu_millis("0.25"), Ok(250));
        assert_eq!(parse_cpu_millis("3500m"), Ok(3500));
        for bad in ["", "m", "1.2345", "-1", "one", "1.5m", "4 cores"] {
            assert!(parse_cpu_millis(bad).is_err(), "{bad}");
        }
        assert_eq!(format_cpu(650), "650m");
        assert_eq!(format_cpu(4000), "4");
        assert_eq!(format_cpu(1500), "1.5");
    }

    #[test]
    fn memory() {
        assert_eq!(parse_memory_bytes("8Gi"), Ok(8 << 30));
        assert_eq!(parse_memory_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_memory_bytes("2G"), Ok(2_000_000_000));
        assert_eq!(parse_memory_bytes("1000"), Ok(1000));
        for bad in ["", "Gi", "1.5Gi", "-1Gi", "8 GiB", "99999999999Pi"] {
            assert!(parse_memory_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(format_memory(960 << 20), "960Mi");
        assert_eq!(format_memory(8 << 30), "8Gi");
    }
}
