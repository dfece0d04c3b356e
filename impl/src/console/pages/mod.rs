//! One module per page; `layout` holds what every page shares (head, navigation, error pages).

pub mod config;
pub mod layout;
pub mod node;
pub mod session;
pub mod sessions;
pub mod workflows;
