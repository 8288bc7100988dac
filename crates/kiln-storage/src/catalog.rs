//! The persisted catalog of table definitions, and the in-memory registry
//! queries read without locking (an `ArcSwap` replaced on DDL only).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::cube::CubeDef;
use crate::error::{Error, Result};
use crate::fs_util::write_atomic;
use crate::schema::TableDef;
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

impl CatalogFile {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("catalog.json")
    }

    pub fn load(dir: &Path) -> Result<Self> {
        let path = Self::path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                what: "catalog",
                path: path.display().to_string(),
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CatalogFile {
                next_table_id: 1,
                tables: vec![],
                next_cube_id: 1,
                cubes: vec![],
            }),
            Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
        }
    }

    /// Replaces the catalog atomically and durably (temp file, fsync, rename, fsync dir).
    /// The cubes of table `table_id`.
    pub fn cubes_of(&self, table_id: u64) -> Vec<Arc<CubeDef>> {
        self.cubes
            .iter()
            .filter(|c| c.table_id == table_id)
            .map(|c| Arc::new(c.clone()))
            .collect()
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = Self::path(dir);
        let bytes = serde_json::to_vec_pretty(self).expect("catalog serializes");
        write_atomic(&path, &bytes)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e.source))
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
