//! What one call's road (`pipeline`, `packs::pack_call`) may touch of the broker: the backends,
//! the approvers, the account's call slots, the client-tool providers and the pack trust asks.
//! The pipeline and its leaves are handed this, not the whole `App`, so the list of what a call
//! can reach is this struct; `App::road` makes it.

use crate::asks::Asks;
use crate::authorize::Deciders;
use crate::backends::Backends;
use crate::call_slots::CallSlots;
use crate::packs::listing::PackHosts;
use crate::packs::trust_asks::TrustAsks;
use crate::registry::Registry;

/// The broker's parts a call uses, borrowed for the call.
#[derive(Clone, Copy)]
pub struct CallRoad<'a> {
    pub backends: &'a Backends,
    pub asks: &'a Asks,
    pub calls: &'a CallSlots,
    pub registry: &'a Registry,
    pub trust_asks: &'a TrustAsks,
}

impl<'a> CallRoad<'a> {
    /// What deciding a call takes (`authorize`): the gate, the executors and the approvers.
    pub(crate) fn deciders(self) -> Deciders<'a> {
        Deciders {
            backends: self.backends,
            asks: self.asks,
        }
    }

    /// What listing an account's packs takes: the pack hosts and the trust asks.
    pub fn pack_hosts(self) -> PackHosts<'a> {
        PackHosts {
            backends: self.backends,
            trust_asks: self.trust_asks,
        }
    }
}
