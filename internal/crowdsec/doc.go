// Package crowdsec is a CrowdSec bouncer: it pulls timed decisions from a
// CrowdSec Local API (LAPI) over the bouncer stream, GET
// <url>/v1/decisions/stream?startup=true|false with the header X-Api-Key,
// and turns the decisions it can enforce (scope Ip or Range, a type in
// Config.Types) into prefixes.
//
// The LAPI is not trusted to be well behaved. The body is decoded as a
// stream, one decision at a time. One decision's JSON text (or the value of
// an unknown key) over MaxDecisionBytes, nesting deeper than 10,000, more
// than Config.MaxDecisions decisions in one answer (new, and deleted in a
// delta; kept or ignored), or an answer not complete within Config.Timeout end the pull
// with an error; nothing is returned from a failed pull.
//
// Memory is bounded by what is kept, not by what the server sends. The
// decoder holds at most one decision's text (MaxDecisionBytes plus 4 KiB of
// read-ahead). A kept decision is at most about 480 bytes: the Decision
// (128 bytes), its value (at most 49 bytes, since it parsed as an address
// or prefix), origin and scenario cut to 128 bytes each. So the worst case
// is Config.MaxDecisions × 480 bytes (about 96 MB at the default 200,000),
// twice that for the moment the gathered blocks are copied into the result.
// Real answers share their origins and scenarios: 100,000 decisions keep
// about 14 MB, and decoding them allocates about 34 MB in all.
//
// The API key is sent only in the X-Api-Key header: it is never logged,
// never put in a URL, and never part of an error text (an answer quoted in
// an error has it blotted out). Redirects are not followed, since they
// would carry the header elsewhere.
//
// What the LAPI (1.4) sends, and what a caller must know:
//   - new and deleted hold one decision per value, scope and type (the
//     stream's deduplication, FormatDecisions in the LAPI's
//     controllers/v1/decisions.go): in new the one that ends last; in
//     deleted whichever of those that ended last the query found first. A
//     deleted entry means no decision of that scope, value and type is left;
//     lift by that key, not by ID (two scenarios' decisions on one address
//     are sent as new under one ID and deleted under the other). A decision
//     deleted while a longer one of its key stands is not listed at all.
//   - A startup answer's deleted lists the expired decisions still in the
//     LAPI's database (kept up to its flush age, 7 days by default), some on
//     values new holds again. New replaces the caller's bans, so they are
//     read through: not returned, not counted toward Config.MaxDecisions
//     (a LAPI holding more expired decisions than the bound still syncs).
//   - Deltas are per bouncer key: the LAPI remembers each key's last pull,
//     so two clients sharing a key take each other's deltas. Deletions are
//     repeated for 2 s after a pull; applying them twice must be harmless.
//   - Only scopes Ip and Range are sent (the LAPI's default filter). An Ip
//     value may be a prefix: cscli decisions import gives every row its
//     --scope, Ip by default, and the LAPI matches the value as the range
//     it names (types.Addr2Ints); such a decision is that range.
package crowdsec
