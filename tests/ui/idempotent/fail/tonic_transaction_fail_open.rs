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

impl Svc {
    #[idempotent(scope = global, transaction = tx, fail_open = true)]
    pub async fn pay(&self, request: Request<Pay>) -> Result<Response<Paid>, Status> {
        Ok(Response::new(Paid { id: request.into_inner().amount }))
    }
}

fn main() {}
