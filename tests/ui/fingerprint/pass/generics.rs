// Type parameters of hashed fields get a `Canonical` bound; parameters used only by `skip` or
// `env` fields get none; lifetimes and borrowed fields work.
use std::marker::PhantomData;

use idem::Fingerprint;

#[derive(Fingerprint)]
struct Page<'a, T, M> {
    items: Vec<T>,
    cursor: Option<&'a str>,
    #[fingerprint(skip)]
    marker: PhantomData<M>,
}

#[derive(Fingerprint)]
struct Wrapper<T>(T);

#[derive(Fingerprint)]
enum Either<L, R> {
    Left(L),
    Right { value: R },
}

trait Store {
    type Id;
}

struct Pg;
impl Store for Pg {
    type Id = u64;
}

#[derive(Fingerprint)]
struct Lookup<S: Store> {
    id: S::Id,
}

// Not `Canonical`: fine, it is only a marker.
struct NotCanonical;

fn hash<F: Fingerprint>(value: &F) -> String {
    value.canonical_json()
}

fn main() {
    let cursor = String::from("c1");
    let page: Page<'_, u8, NotCanonical> = Page {
        items: vec![1, 2],
        cursor: Some(&cursor),
        marker: PhantomData,
    };
    assert_eq!(hash(&page), r#"{"cursor":"c1","items":[1,2]}"#);
    assert_eq!(hash(&Wrapper(Wrapper(7u8))), "7");
    assert_eq!(hash(&Either::<u8, String>::Left(1)), r#"{"Left":1}"#);
    assert_eq!(
        hash(&Either::<u8, String>::Right { value: "r".into() }),
        r#"{"Right":{"value":"r"}}"#
    );
    assert_eq!(hash(&Lookup::<Pg> { id: 9 }), r#"{"id":9}"#);
}
