//! The persisted catalog of table definitions, and the in-memory registry
//! queries read without locking (an `ArcSwap` replaced on DDL only).

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::cube::CubeDef;
use crate::error::{Error, Result};
use crate::schema::TableDef;
use crate::store::Store;
use crate::table::Table;

#[derive(Default, Serialize, Deserialize)]
pub(crate) struct CatalogFile {
    pub next_table_id: u64,
    pub tables: Vec<TableDef>,
    #[serde(default)]
    pub next_cube_id: u64,
    #[serde(default)]
    pub cubes: Vec<CubeDef>,
}

/// The catalog's object, at the root of the store.
const CATALOG: &str = "catalog.json";

impl CatalogFile {
    /// The catalog in `store`, or an empty one if there is none yet.
    pub async fn load(store: &Store) -> Result<Self> {
        let path = object_store::path::Path::from(CATALOG);
        match store.get_opt(&path).await? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                what: "catalog",
                path: format!("{}/{CATALOG}", store.location()),
                reason: e.to_string(),
            }),
            None => Ok(CatalogFile {
                next_table_id: 1,
                tables: vec![],
                next_cube_id: 1,
                cubes: vec![],
            }),
        }
    }

    /// The cubes of table `table_id`.
    pub fn cubes_of(&self, table_id: u64) -> Vec<Arc<CubeDef>> {
        self.cubes
            .iter()
            .filter(|c| c.table_id == table_id)
            .map(|c| Arc::new(c.clone()))
            .collect()
    }

    /// Replaces the catalog atomically (a reader sees the old or the new
    /// one, whole) and durably.
    pub async fn save(&self, store: &Store) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self).expect("catalog serializes");
        store
            .put_durable(&object_store::path::Path::from(CATALOG), bytes.into())
            .await
    }
}

/// Tables by name and id. Readers `load()` it lock-free.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    pub by_name: BTreeMap<String, Arc<Table>>,
    pub by_id: BTreeMap<u64, Arc<Table>>,
}

impl Registry {
    pub fn with(&self, table: Arc<Table>) -> Self {
        let mut r = self.clone();
        r.by_id.insert(table.def.id, table.clone());
        r.by_name.insert(table.def.name.clone(), table);
        r
    }

    pub fn without(&self, name: &str) -> Self {
        let mut r = self.clone();
        if let Some(t) = r.by_name.remove(name) {
            r.by_id.remove(&t.def.id);
        }
        r
    }
}

pub(crate) type SharedRegistry = Arc<ArcSwap<Registry>>;
