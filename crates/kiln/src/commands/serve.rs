//! `kiln serve`: the HTTP API and the PostgreSQL wire protocol in one
//! process over one database; everything lives in `kiln-server`.

use super::BoxError;
use crate::config::ServeArgs;

pub async fn run(args: ServeArgs) -> Result<(), BoxError> {
    kiln_server::run(args.storage, args.query, args.server).await
}
