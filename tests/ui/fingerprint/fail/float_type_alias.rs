use idem::Fingerprint;

type Ratio = f64;

// An alias hides the float from the derive; the `Canonical` bound still catches it.
#[derive(Fingerprint)]
struct Quote {
    ratio: Ratio,
}

fn main() {}
