//! What the fixtures' tests share: the rows of a table.

use haptic_journal::redb::{self, ReadableTable};

/// Every row of table `def` of `rtx`, in key order, as `row` maps it; the error when the table
/// does not open (it does not exist, or has other key or value types).
pub fn try_rows<K, V, R>(
    rtx: &redb::ReadTransaction,
    def: redb::TableDefinition<K, V>,
    mut row: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> R,
) -> Result<Vec<R>, redb::TableError>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
{
    let table = rtx.open_table(def)?;
    Ok(table
        .iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            row(k.value(), v.value())
        })
        .collect())
}

/// A row of [`byte_rows`]: the key's text and the value, raw.
pub type Row = (String, Vec<u8>);

/// Every row of the table `def` of `rtx` (which must open; its values are bytes, an envelope in
/// every table but `meta`), in key order: `key`'s text of its key and the value, raw.
pub fn byte_rows<K: redb::Key + 'static>(
    rtx: &redb::ReadTransaction,
    def: redb::TableDefinition<K, &'static [u8]>,
    key: impl Fn(K::SelfType<'_>) -> String,
) -> Vec<Row> {
    try_rows(rtx, def, |k, v| (key(k), v.to_vec())).unwrap()
}
