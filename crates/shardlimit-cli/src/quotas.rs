//! `--quota NAME=60/1m`: the quotas rows are judged against beyond the
//! catalog the limiters publish, and the catalog read with them.

use shardlimit::Quota;
use shardlimit::admin::{Catalog, Scanner};

/// The quotas rows are judged against, beyond the catalog.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct QuotaArgs {
    /// The quota of the rate limiters named NAME (repeatable), e.g.
    /// api=60/1m or api=10/1s:burst=20: for limiters that do not publish
    /// theirs to the catalog (other versions). Wins over the catalog.
    #[arg(long = "quota", value_name = "NAME=LIMIT/PERIOD", value_parser = crate::syntax::given_quota)]
    pub(crate) given: Vec<(String, Quota)>,
}

/// The catalog the scanner reads, with the `--quota` flags, which win. A
/// catalog that cannot be read is said on stderr; the flags still count.
pub(crate) async fn catalog(scanner: &Scanner, given: &QuotaArgs) -> Catalog {
    let mut catalog = scanner.catalog().await.unwrap_or_else(|err| {
        eprintln!("the catalog of limits could not be read: {err}; only --quota counts");
        Catalog::new()
    });
    for (name, quota) in &given.given {
        catalog.give(name.clone(), *quota);
    }
    catalog
}
