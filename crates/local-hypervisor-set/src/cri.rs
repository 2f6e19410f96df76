//! The few CRI calls this crate makes, through `oi_cri`, from synchronous code.

use std::path::Path;

use oi_cri::{ClientOptions, CriClient, CriEndpoint};

use crate::error::{Error, Result};

fn block_on<F: std::future::Future>(future: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::AsyncRuntime)?;
    Ok(runtime.block_on(future))
}

/// Stops and removes every pod sandbox (and so every container) of a hypervisor's containerd.
/// Returns how many there were.
///
/// # Errors
/// [`Error::Cri`] when the runtime cannot be reached or refuses.
pub fn remove_all_pods(hypervisor: &str, socket: &Path) -> Result<usize> {
    let cri_err = |source| Error::Cri {
        hypervisor: hypervisor.to_string(),
        source: Box::new(source),
    };
    block_on(async {
        let client = CriClient::connect(
            hypervisor,
            CriEndpoint::Unix(socket.to_path_buf()),
            ClientOptions::default(),
        )
        .await
        .map_err(cri_err)?;
        let sandboxes = client.list_sandboxes(None).await.map_err(cri_err)?;
        for sandbox in &sandboxes {
            client
                .stop_and_remove_sandbox(&sandbox.id)
                .await
                .map_err(cri_err)?;
        }
        Ok(sandboxes.len())
    })?
}
