//! The structural model of an HAProxy configuration and the diff between what a pod runs and
//! the render, as Dataplane API configuration changes. Pure: no I/O.
//!
//! ```text
//!  text ─► parse ─► ParsedConfig: sections keyed by (kind, name), lines tokenised as HAProxy does
//!  equal(running, render): section by section, line families (below), order where HAProxy cares
//!  diff(running, render) ─► Changes([ConfigChange]) in apply order
//!                         | Unmodelled { what }  (the change touches something not modelled)
//! ```
//!
//! Roles: [`parse`](parse()) and [`tokenize`] (`parse.rs`: HAProxy's word rules, and the way
//! back from a word to the text HAProxy reads as that word); [`equal`] (`equal.rs`: families and
//! the order rules); the Dataplane object models (`model.rs`: sections, rules, ACLs;
//! `server.rs`: servers, templates, binds, `default-server`); [`diff`] (`diff.rs`).
//!
//! # What never counts as a change
//! Comments, blank lines, indentation and spacing; quoting that HAProxy resolves the same
//! (`"text/plain"` = `text/plain`, `'a b'` = `"a b"` = `a\ b`); the Dataplane API's own header
//! lines (`# _version=`, `# _md5hash=`: comments); the order of sections; the order of lines of
//! different families inside a section (HAProxy evaluates each rule set on its own; the real
//! Dataplane API writes the keywords in config-parser's fixed sequence, `ParserSequence` in
//! `config-parser/section-parsers.go`); the order of server and `default-server` parameters;
//! time units (`5000ms` = `5s`); an unnamed `defaults` against the `defaults unnamed_defaults_N`
//! the API names it; and a `from` naming the defaults section that applies anyway. This is the
//! layout the real API rewrites `haproxy.cfg` into after any write (a raw push included), so a
//! drift check after a fine-grained change finds no difference.
//!
//! # Families, and the order HAProxy cares about
//! A line's family is its keyword (`http-request`, `use_backend`, `acl`, `http-check`,
//! `tcp-check`, `stick`, `default-server`), with the second word for `timeout`, `option`/`no
//! option`, `tcp-request`, `tcp-response`, `stats`, `capture`, `errorfile`, `monitor`,
//! `compression`, `user`, `group`, `nameserver`, `peer`, `mailer`, and the object's name for
//! keyed objects (`server NAME`, `server-template PREFIX`). Lines of one family are compared in
//! order, except binds, compared as a set. So:
//! - **Check steps run in order.** Every `http-check` line is one family, every `tcp-check` line
//!   another: reordering steps (`connect`, `send`, `expect`, `comment`, `set-var`, ...) is a
//!   change, whatever other lines stand between them (HAProxy builds one step list per rule set,
//!   in file order, and refuses some orders: "unable to add http-check send rule at step 2
//!   (missing connect rule)"); config-parser keeps each group in file order too. The place of an
//!   `option httpchk` line among the steps is not a change: HAProxy merges the option's request
//!   into the first send step wherever the option stands (`tcpcheck_add_http_rule`; checked on
//!   HAProxy 2.6: `option httpchk GET /x` before or after `http-check send hdr X-A 1` sends the
//!   same request), and the API writes options before steps. `http-check` and `tcp-check` lines
//!   never share a rule set, so their order against each other is not compared.
//! - **`default-server` applies to the servers after it.** A `server`/`server-template` line is
//!   compared together with the number of `default-server` lines before it in its section: moving
//!   a `default-server` line across a server is a change; servers on the same side of every
//!   `default-server` line compare by name, in any order (HAProxy 2.6: `server a ...`,
//!   `default-server maxconn 7`, `server b ...` gives `b` a limit of 7 and `a` none). The API
//!   writes every `default-server` line before the servers, so its layout of a render with the
//!   lines first compares equal.
//! - `stick` rules are one family (`stick match`/`on`/`store-request` share one list, first
//!   match wins).
//!
//! # Modelled for fine-grained changes ([`diff`])
//! - sections `backend` and `frontend`: create, delete, and replace of their attributes
//!   (backend: `mode`, `balance <simple algorithm>`, `timeout connect|server|queue|check|
//!   tunnel|http-request|http-keep-alive`; frontend: `mode`, `maxconn`, `default_backend`,
//!   `option httplog`, `timeout client|http-request|http-keep-alive`);
//! - in a backend: `server` (by name) and `server-template` (by prefix), with the server
//!   parameters of [`SERVER_PARAMS`];
//! - in a frontend: `bind` (by name: its `name` parameter, else `address:port`) with a few
//!   parameters, `use_backend` rules (by index);
//! - in both: `acl` lines, `http-request` rules (`allow`, `deny`, `return`, `set-header`,
//!   `add-header`, `del-header`, `redirect`) and `http-response` rules (`allow`, `deny`,
//!   `set-header`, `add-header`, `del-header`), by index, with an `if`/`unless` condition.
//!
//! **Texts are sent as HAProxy must read them.** The real API writes a model's string fields
//! into the file as given, so a rule's texts (`return_content`, `return_content_type`,
//! `hdr_name`, `hdr_format`, `redir_value`, an ACL's values, a condition's words) are sent in
//! the form HAProxy reads back as the same word: as is when the word stands alone, else in
//! double quotes (`"Service unavailable"`, the form the API's own GET returns) with `"`, `$`,
//! control characters and backslashes HAProxy would read as an escape escaped. Unquoted text
//! with a space breaks the commit ("expects either 'if' or 'unless' followed by a condition but
//! found ..."). Names (servers, templates, binds, ACLs, backends) and server and bind parameter
//! values are sent as is, so one that would need quotes has no model; so has a word holding an
//! environment variable (`"${NAME}"`: the pod's environment is not known here).
//!
//! Anything else that differs (global, defaults, listen, userlists, resolvers, peers, mailers,
//! caches, rings, http-errors and the other sections; filters, tcp rules, `http-check` and
//! `tcp-check` steps, stick, log targets, `default-server`, an unknown server parameter, ...) is
//! [`ConfigDiff::Unmodelled`]: the sync pushes the whole configuration instead of guessing a
//! model. So is every difference while either side has a `default-server` line after a server
//! ([`default_server_after_server`]): the API would rewrite that section with the line first,
//! which HAProxy runs differently.

mod diff;
mod equal;
mod model;
mod parse;
mod server;

pub use diff::{ConfigChange, ConfigDiff, RUNTIME_SERVER_FIELDS, diff};
pub use equal::{default_server_after_server, equal};
pub use model::{ChildKey, ChildKind, ObjectBody, Parent, ParentKind};
pub use parse::{
    Line, ParsedConfig, SECTION_KEYWORDS, Section, SectionKey, parse, time_ms, tokenize,
};
pub use server::{SERVER_PARAMS, server_field};
