//! `kiln sql`: run statements against a data directory.

use kiln_query::Engine;
use kiln_storage::Db;

use super::BoxError;
use crate::config::SqlArgs;
use crate::output;

pub async fn run(args: SqlArgs) -> Result<(), BoxError> {
    let db = Db::open(args.storage).await?;
    let engine = Engine::new(db.clone())?;
    let result = async {
        let mut out = std::io::stdout().lock();
        for stmt in Engine::parse(&args.sql)? {
            let res = engine.execute_statement(stmt).await?;
            output::print(&mut out, &res, args.format)?;
        }
        Ok::<_, BoxError>(())
    }
    .await;
    let closed = db.close().await;
    result?;
    Ok(closed?)
}
