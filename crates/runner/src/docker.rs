//! (Being written by the runner-periphery engineer.)
