//! The single-writer registry's core: one slot per session with a write handle open (or
//! being opened) in this `LogStore` instance. Synchronous and generic over how a slot
//! names its owner, so the same code runs in the store (owners are
//! `Weak<HandleShared>`, the map behind a `std::sync::Mutex`) and in the loom models of
//! `tests/loom_models.rs` (owners are plain ids with a liveness flag, the map behind a
//! `loom::sync::Mutex`), which check every interleaving of `open(write)`, `close`, a
//! double `close` and a drop whose final drain still holds the writer.
//!
//! Invariants (what the models check): a slot is taken only when it is free or its
//! owner is gone, so at most one write handle per id is ever live; releasing checks the
//! owner, so a late or repeated `close` never frees a slot someone else now holds; a
//! dropped handle's slot is turned back into a claim for its final drain and freed after.

use std::collections::HashMap;
use std::hash::Hash;

/// How a slot names the handle that owns it.
pub trait OwnerRef {
    /// What a caller names itself with when it releases (`HandleShared` in the store).
    type Owner: ?Sized;
    /// Whether this reference names `owner`.
    fn is_owner(&self, owner: &Self::Owner) -> bool;
    /// Whether the owner still exists (a dropped handle's slot is free to take).
    fn alive(&self) -> bool;
}

/// One registry slot.
pub enum Slot<W> {
    /// A write open is in progress (the backend is claiming the lease), or a dropped
    /// handle's final drain still holds the backend writer.
    Claiming,
    Owned(W),
}

/// Why a claim was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occupied {
    /// Another open (or a final drain) holds the slot.
    Claiming,
    /// A live handle owns the id.
    Owned,
}

/// The registry: session key → slot.
pub struct Registry<K, W> {
    slots: HashMap<K, Slot<W>>,
}

impl<K, W> Default for Registry<K, W> {
    fn default() -> Self {
        Registry { slots: HashMap::new() }
    }
}

impl<K: Eq + Hash + Clone, W: OwnerRef> Registry<K, W> {
    /// Takes `key`'s slot for a write open or a create: refused while another claim or
    /// a live owner holds it.
    pub fn claim(&mut self, key: &K) -> Result<(), Occupied> {
        match self.slots.get(key) {
            Some(Slot::Claiming) => return Err(Occupied::Claiming),
            Some(Slot::Owned(owner)) if owner.alive() => return Err(Occupied::Owned),
            _ => {}
        }
        self.slots.insert(key.clone(), Slot::Claiming);
        Ok(())
    }

    /// A claim became a handle: the slot now names it.
    pub fn install(&mut self, key: &K, owner: W) {
        self.slots.insert(key.clone(), Slot::Owned(owner));
    }

    /// Frees `key`'s slot if it still belongs to `owner` (or, with `None`, if it is a
    /// claim): a `close` after the slot changed hands frees nothing.
    pub fn release(&mut self, key: &K, owner: Option<&W::Owner>) {
        let ours = match (self.slots.get(key), owner) {
            (Some(Slot::Owned(reference)), Some(owner)) => reference.is_owner(owner) || !reference.alive(),
            (Some(Slot::Claiming), None) => true,
            _ => false,
        };
        if ours {
            self.slots.remove(key);
        }
    }

    /// Turns `key`'s slot from "owned by `owner`" into a claim (a dropped handle's
    /// final drain still holds the writer). Returns whether it did; the caller then
    /// releases the claim (`release(key, None)`) when the drain ends.
    pub fn reclaim(&mut self, key: &K, owner: &W::Owner) -> bool {
        let ours = matches!(self.slots.get(key), Some(Slot::Owned(reference)) if reference.is_owner(owner));
        if ours {
            self.slots.insert(key.clone(), Slot::Claiming);
        }
        ours
    }

    pub fn get(&self, key: &K) -> Option<&Slot<W>> {
        self.slots.get(key)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn slots(&self) -> impl Iterator<Item = &Slot<W>> {
        self.slots.values()
    }
}
