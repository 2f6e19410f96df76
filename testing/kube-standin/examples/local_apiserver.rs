//! Runs an in-memory API server stand-in on loopback and writes an admin kubeconfig, for
//! trying `kubectl` against it by hand: `cargo run -p oi-kube-standin --example
//! local_apiserver -- /tmp/dir`, then `kubectl --kubeconfig /tmp/dir/kubeconfig get ns`.
//! Prints every request it gets.

fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".to_string());
    let server =
        oi_kube_standin::local::LocalApiServer::start(oi_kube_standin::local::LocalOptions {
            record_requests: true,
            ..Default::default()
        })?;
    let path = server.write_admin_kubeconfig(std::path::Path::new(&dir))?;
    println!("serving on {}; kubeconfig {}", server.url(), path.display());
    let mut seen = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let requests = server.api().requests();
        for r in &requests[seen..] {
            println!("{r}");
        }
        seen = requests.len();
    }
}
