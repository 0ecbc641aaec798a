//! A workload held for many replays: its columns copied once, and the identities of its prompt
//! blocks computed once per block size and shared by every replay, from any number of threads.
//!
//! A planner replays one trace under hundreds of configurations; naming the prompt blocks of the
//! conversation trace (`BlockIds::new`) takes 10-15 ms at 64-token blocks and 20-35 ms at 32,
//! 5-15 % of a replay, and each copy holds 9-18 MB. A replay of a prepared workload gives the
//! same report as a replay of its columns: the tables are the ones `BlockIds::new` builds,
//! keyed by everything that shapes them (block size and first identity). The prefix chains of
//! the trace blocks (`TraceChains`, what the SGLang flavour's radix cache compares prompts by)
//! are held once too.

use std::sync::{Arc, Mutex, OnceLock};

use crate::block_ids::{BlockId, BlockIds, TraceChains};
use crate::error::Result;
use crate::workload::{Columns, Workload};

/// One table, computed by the first replay that needs it while others wait for it.
type Table = Arc<OnceLock<Result<Arc<BlockIds>>>>;

/// Request columns owned for many replays, with their block identity tables.
#[derive(Debug)]
pub struct PreparedWorkload {
    columns: Columns,
    /// (block size, first identity) -> table; a handful of entries, searched in order.
    tables: Mutex<Vec<((u32, BlockId), Table)>>,
    chains: OnceLock<Arc<TraceChains>>,
}

impl PreparedWorkload {
    /// Check `workload` and copy its columns.
    pub fn new(workload: &Workload) -> Result<Self> {
        workload.validate()?;
        Ok(Self::checked(Columns::copied(workload)))
    }

    /// Check `columns` and keep them (no copy).
    pub fn from_columns(columns: Columns) -> Result<Self> {
        columns.workload().validate()?;
        Ok(Self::checked(columns))
    }

    fn checked(columns: Columns) -> Self {
        PreparedWorkload {
            columns,
            tables: Mutex::new(Vec::new()),
            chains: OnceLock::new(),
        }
    }

    /// The columns, borrowed.
    pub fn workload(&self) -> Workload<'_> {
        self.columns.workload()
    }

    /// `BlockIds::new(workload, block_size, first_id)`, computed on the first call.
    pub fn block_ids(&self, block_size: u32, first_id: BlockId) -> Result<Arc<BlockIds>> {
        let key = (block_size, first_id);
        let table = {
            // The lock only guards the list; a table is built outside it (others wait on its
            // cell, not on the list). A panic elsewhere cannot leave the list half-changed.
            let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
            match tables.iter().find(|(k, _)| *k == key) {
                Some((_, t)) => t.clone(),
                None => {
                    let t = Table::default();
                    tables.push((key, t.clone()));
                    t
                }
            }
        };
        table
            .get_or_init(|| BlockIds::new(&self.workload(), block_size, first_id).map(Arc::new))
            .clone()
    }

    /// `TraceChains::new(workload)`, computed on the first call.
    pub fn trace_chains(&self) -> Arc<TraceChains> {
        self.chains
            .get_or_init(|| Arc::new(TraceChains::new(&self.workload())))
            .clone()
    }

    /// How many block identity tables are held.
    pub fn tables_held(&self) -> usize {
        self.tables.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::tests::columns as workload;

    #[test]
    fn a_table_is_built_once_per_block_size_and_first_id() {
        let w = workload(
            &[7, 8, 7, 9],
            &[0, 2, 4],
            &[1024, 1000],
            &[1, 1],
            &[0.0; 2],
            512,
        );
        let p = PreparedWorkload::new(&w).unwrap();
        let a = p.block_ids(64, 0).unwrap();
        let b = p.block_ids(64, 0).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = p.block_ids(64, a.end()).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.of(0)[0], a.end());
        p.block_ids(32, 0).unwrap();
        assert_eq!(p.tables_held(), 3);
        // The same identities as a table built from the columns.
        let fresh = BlockIds::new(&w, 64, 0).unwrap();
        assert_eq!(
            (a.of(0), a.of(1), a.end()),
            (fresh.of(0), fresh.of(1), fresh.end())
        );
    }

    #[test]
    fn threads_share_one_table() {
        let w = workload(&[1, 2, 3], &[0, 3], &[1536], &[1], &[0.0], 512);
        let p = PreparedWorkload::new(&w).unwrap();
        let tables: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| p.block_ids(16, 0))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert!(tables.iter().all(|t| Arc::ptr_eq(t, &tables[0])));
        assert_eq!(p.tables_held(), 1);
    }

    #[test]
    fn a_bad_workload_is_refused_up_front() {
        let w = workload(&[1], &[0, 1], &[1024], &[1], &[0.0], 512);
        assert!(PreparedWorkload::new(&w).is_err());
    }
}
