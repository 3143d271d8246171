//! Links llguidance into a static library: its `llg_*` C functions are
//! the whole interface (see llguidance.h).
pub use llguidance;
