//! The DataFusion session, built once per process and shared by every query:
//! config, runtime (object store, Parquet metadata cache) and the catalog
//! of Kiln tables. Nothing here is rebuilt or re-read per query (seeds/000).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, SchemaProvider};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use kiln_storage::{Db, STORE_URL};

use crate::provider::KilnTable;
use crate::queries::QueryRegistry;
use crate::segment_cache::SegmentCache;

/// Catalog and schema names of user tables.
pub const CATALOG: &str = "kiln";
pub const SCHEMA: &str = "public";

/// The `public` schema: a live view of the database's tables.
#[derive(Debug)]
pub struct KilnSchema {
    db: Db,
    cache: Arc<SegmentCache>,
}

#[async_trait]
impl SchemaProvider for KilnSchema {
    fn table_names(&self) -> Vec<String> {
        self.db
            .tables()
            .iter()
            .map(|t| t.name().to_string())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .db
            .table(name)
            .map(|t| Arc::new(KilnTable::new(self.db.clone(), t, self.cache.clone())) as _))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.table(name).is_some()
    }
}

/// Builds the shared session over `db`; its scans share `cache`.
pub fn build_session(
    db: &Db,
    target_partitions: usize,
    queries: Arc<QueryRegistry>,
    cache: Arc<SegmentCache>,
) -> DfResult<SessionContext> {
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_default_catalog_and_schema(CATALOG, SCHEMA)
        .with_create_default_catalog_and_schema(false)
        .with_target_partitions(target_partitions.max(1));
    let opts = config.options_mut();
    opts.execution.parquet.pushdown_filters = false;
    opts.execution.parquet.enable_page_index = true;
    let runtime = RuntimeEnvBuilder::new().build_arc()?;
    let url = ObjectStoreUrl::parse(STORE_URL)?;
    runtime.register_object_store(url.as_ref(), db.store().object_store());
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_analyzer_rule(Arc::new(crate::shared::SharedSubplans))
        .with_optimizer_rule(Arc::new(crate::time_predicates::TimePredicates))
        .with_query_planner(Arc::new(crate::shared::QueryPlanner))
        .with_physical_optimizer_rule(Arc::new(crate::dedup::DropRepeats))
        .with_physical_optimizer_rule(Arc::new(crate::partials::SegmentPartials))
        .build();
    let ctx = SessionContext::new_with_state(state);
    crate::functions::register(&ctx);
    let catalog = MemoryCatalogProvider::new();
    catalog
        .register_schema(
            SCHEMA,
            Arc::new(KilnSchema {
                db: db.clone(),
                cache: cache.clone(),
            }),
        )
        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
    catalog
        .register_schema(
            crate::system::SYSTEM,
            Arc::new(crate::system::SystemSchema::new(
                db.clone(),
                queries,
                cache.clone(),
            )),
        )
        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
    ctx.register_catalog(CATALOG, Arc::new(catalog));
    Ok(ctx)
}
