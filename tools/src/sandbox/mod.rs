//! Protocol-faithful local peers (DESIGN.md §5): [`apiserver`] emulates the Kubernetes API,
//! [`pods`] runs real HAProxy processes behind Dataplane API v3 endpoints. [`control`] holds the
//! rules both peers' `/_sandbox/` control paths share.

pub mod apiserver;
pub mod cluster;
pub mod control;
pub mod documented;
pub mod pods;
