//! The kernbench runtime: executing compiled kernels on data.
//!
//! - `exec`: functional execution of a launch (all program instances,
//!   flat memory, no timing).
//! - `args`: tensor and scalar arguments as `tlc run` takes them
//!   (`.npy` files, `rand(...)`, `zeros(...)`, values).
//! - `sim`: the simulated machine (discrete-event timing with real data).
//! - `ccl`: the collective-algorithm registry (`ccl.yaml`) and `tlc bench
//!   ccl`.
//! - `host`: the PyTorch-shaped host API (`Runtime`, tensors and placement
//!   policies, launches, `distributed`, `spawn`).
//! - `tp`: Megatron-style tensor-parallel layers on the host API.
//! - `topology`: the machine description (`topology.yaml`), presets and
//!   the summary `tlc topology` prints.

pub mod alloc;
pub mod args;
pub mod ccl;
pub mod exec;
pub mod host;
pub mod sim;
pub mod topology;
pub mod tp;
pub mod yaml;
