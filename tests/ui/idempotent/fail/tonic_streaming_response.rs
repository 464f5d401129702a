use idem::{Fingerprint, Idem, Snapshot, idempotent};
use tonic::{Request, Response, Status};

#[derive(Clone, PartialEq, prost::Message, Fingerprint)]
pub struct Pay {
    #[prost(string, tag = "1")]
    pub amount: String,
}

#[derive(Clone, PartialEq, prost::Message, Snapshot)]
pub struct Paid {
    #[prost(string, tag = "1")]
    #[snapshot(biz_no)]
    pub id: String,
}

pub struct Svc {
    idem: Idem,
}

impl idem::AsIdem for Svc {
    fn as_idem(&self) -> &Idem {
        &self.idem
    }
}

#[tonic::async_trait]
pub trait Payments: Send + Sync + 'static {
    type ListStream: Send + 'static;
    async fn list(&self, request: Request<Pay>) -> Result<Response<Self::ListStream>, Status>;
}

#[tonic::async_trait]
impl Payments for Svc {
    type ListStream = Vec<Paid>;

    #[idempotent(scope = global)]
    async fn list(&self, request: Request<Pay>) -> Result<Response<Self::ListStream>, Status> {
        let _ = request;
        Ok(Response::new(Vec::new()))
    }
}

fn main() {}
