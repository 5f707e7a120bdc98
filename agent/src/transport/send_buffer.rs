//! Bytes that a non-blocking send may read after the call that started it
//! returned (MPI keeps reading an abandoned send's buffer).

use std::ptr::NonNull;

/// A copy of the bytes on the heap, owned through the pointer that
/// allocated it: [`SendBuffer::bytes`] lends them to the send,
/// [`SendBuffer::free`] frees them once the send completed, and dropping
/// the buffer without freeing leaves them to the send for good.
pub(crate) struct SendBuffer {
    /// From `Box::into_raw`: it keeps the allocation's write permission,
    /// which freeing needs (a pointer derived from a shared reference
    /// lacks it).
    raw: NonNull<[u8]>,
}

impl SendBuffer {
    /// A copy of `bytes`.
    pub(crate) fn new(bytes: &[u8]) -> Self {
        let boxed: Box<[u8]> = bytes.into();
        SendBuffer {
            // A box's pointer is never null.
            raw: NonNull::from(Box::leak(boxed)),
        }
    }

    /// The bytes, for a send that may outlive this borrow (MPI's
    /// `StaticScope`).
    ///
    /// # Safety
    ///
    /// The slice must not be read after [`SendBuffer::free`]: free only
    /// once the send that reads it completed.
    pub(crate) unsafe fn bytes(&self) -> &'static [u8] {
        // SAFETY: the allocation lives until `free` (the caller's promise).
        unsafe { self.raw.as_ref() }
    }

    /// Frees the bytes.
    ///
    /// # Safety
    ///
    /// Nothing reads them any more: the send that had them completed.
    pub(crate) unsafe fn free(self) {
        // SAFETY: `raw` came from `Box::leak` of a `Box<[u8]>` and is freed
        // once (this consumes the buffer); no borrow is used after this.
        drop(unsafe { Box::from_raw(self.raw.as_ptr()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under Miri (`scripts/miri.sh`): reading through the lent slice,
    /// then freeing, is sound under Stacked and Tree Borrows. Freeing
    /// through a pointer made from the slice (what the send path did) is
    /// reported as undefined behaviour there.
    #[test]
    fn a_buffer_lends_its_bytes_then_frees_them() {
        let buffer = SendBuffer::new(b"payload");
        // SAFETY: read before the free.
        let lent = unsafe { buffer.bytes() };
        assert_eq!(lent, b"payload");
        // SAFETY: nothing reads `lent` after this.
        unsafe { buffer.free() };
    }
}
