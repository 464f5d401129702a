use idem::Fingerprint;

#[derive(Fingerprint)]
enum Method {
    Card { number: String },
}

fn main() {
    let _ = idem::fields!(Method: number);
}
