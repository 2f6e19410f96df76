//! object_store's requests over [`oi_http`]: one pooled client per store, its TLS
//! configuration (the system's roots and `AWS_CA_BUNDLE`) built once.

use bytes::Bytes;
use http_body_util::BodyExt as _;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService,
};

#[derive(Debug)]
pub(crate) struct Connector(pub(crate) oi_http::Client);

impl HttpConnector for Connector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Service(self.0.clone())))
    }
}

#[derive(Debug)]
struct Service(oi_http::Client);

#[async_trait::async_trait]
impl HttpService for Service {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = request.into_parts();
        let body: oi_http::Body = body.map_err(|e| Box::new(e) as oi_http::BoxError).boxed();
        let response = self
            .0
            .send(http::Request::from_parts(parts, body))
            .await
            .map_err(|e| {
                let kind = match &e {
                    oi_http::Error::Connect(_) => HttpErrorKind::Connect,
                    oi_http::Error::Timeout(_) => HttpErrorKind::Timeout,
                    // It may have been acted on: retried only where the request is
                    // idempotent.
                    oi_http::Error::Exchange(_) => HttpErrorKind::Interrupted,
                    oi_http::Error::Settings(_) => HttpErrorKind::Unknown,
                };
                HttpError::new(kind, e)
            })?;
        let (parts, body) = response.into_parts();
        let body = body.map_err(|e| HttpError::new_boxed(HttpErrorKind::Interrupted, e));
        Ok(HttpResponse::from_parts(
            parts,
            HttpResponseBody::new(body.map_frame(|f| f.map_data(Bytes::from))),
        ))
    }
}
