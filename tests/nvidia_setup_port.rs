//! The Rhai port of nvidia-setup (`examples/nvidia-setup`) run by the agent on the fake
//! GPU-node hosts of `tests/fakehosts`; the shared fake-node helpers are in `nvidia_ports`.
