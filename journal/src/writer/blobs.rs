//! Blob reference counts (DESIGN.md invariant 4): adjusting them and collecting blobs whose
//! counts reach zero.

use redb::ReadableTable;

use super::Tx;
use crate::batch::BlobKind;
use crate::corrupt::{Corrupt, RecordKey};
use crate::decode;
use crate::error::AcceptError;
use crate::ids::Checksum;

impl Tx<'_> {
    pub(super) fn blob_exists(&mut self, h: &Checksum) -> Result<bool, AcceptError> {
        Ok(self
            .refs()?
            .get(h.as_bytes().as_slice())
            .map_err(AcceptError::storage)?
            .is_some())
    }

    pub(super) fn counts(&mut self, h: &Checksum) -> Result<Option<(u64, u64)>, AcceptError> {
        Ok(self
            .refs()?
            .get(h.as_bytes().as_slice())
            .map_err(AcceptError::storage)?
            .map(|v| v.value()))
    }

    /// Adds `refs`/`holds` (may be negative) to a blob's counts; schedules GC at zero.
    pub(super) fn adjust(&mut self, h: Checksum, refs: i64, holds: i64) -> Result<(), AcceptError> {
        let Some((r, hd)) = self.counts(&h)? else {
            if refs > 0 || holds > 0 {
                return Err(AcceptError::MissingBlob { blob: h });
            }
            // A decrement of a blob that is already gone: verify reports the mismatch.
            return Ok(());
        };
        let r = r.saturating_add_signed(refs);
        let hd = hd.saturating_add_signed(holds);
        self.refs()?
            .insert(h.as_bytes().as_slice(), (r, hd))
            .map_err(AcceptError::storage)?;
        if r == 0 && hd == 0 {
            self.gc.push(h);
        }
        Ok(())
    }

    /// Drops the render reference of a replaced or removed `endpoint_applied` record.
    pub(super) fn release_endpoint_render(
        &mut self,
        bytes: &[u8],
        endpoint: &str,
    ) -> Result<(), AcceptError> {
        let (_, old) =
            decode::endpoint_applied(bytes).map_err(Corrupt::text("endpoint_applied", endpoint))?;
        self.adjust(old.render, -1, 0)
    }

    /// Drops the render references of a replaced `component_state` record.
    pub(super) fn release_checkpoint_renders(
        &mut self,
        bytes: &[u8],
        component: &str,
    ) -> Result<(), AcceptError> {
        let (_, old) = decode::component_checkpoint(bytes)
            .map_err(Corrupt::text("component_state", component))?;
        for h in old.state.renders() {
            self.adjust(h, -1, 0)?;
        }
        Ok(())
    }

    /// Removes every scheduled blob whose counts are still zero, cascading into render files.
    pub(super) fn collect(&mut self) -> Result<(), AcceptError> {
        while let Some(h) = self.gc.pop() {
            if self.counts(&h)? != Some((0, 0)) {
                continue;
            }
            self.refs()?
                .remove(h.as_bytes().as_slice())
                .map_err(AcceptError::storage)?;
            let removed = self
                .blobs()?
                .remove(h.as_bytes().as_slice())
                .map_err(AcceptError::storage)?
                .map(|v| v.value().to_vec());
            if let Some(bytes) = removed {
                let corrupt = |reason| Corrupt {
                    table: "blobs",
                    key: RecordKey::Blob(h),
                    reason,
                };
                let (_, kind, content) = decode::blob(&bytes).map_err(corrupt)?;
                if kind == BlobKind::Render {
                    let render = decode::render(content).map_err(corrupt)?;
                    for child in render.blob_refs() {
                        self.adjust(child, -1, 0)?;
                    }
                }
            }
        }
        Ok(())
    }
}
