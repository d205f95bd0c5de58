//! The seat's traffic with the hub: tolerant reads (cards, lessons, policy links, the tip) and
//! the ordered background sender of `/register` and `/send`.

pub(crate) mod bus;
pub(crate) mod hubio;
