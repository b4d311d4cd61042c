// Package crowdsec is a CrowdSec bouncer: it pulls timed decisions from a
// CrowdSec Local API (LAPI) over the bouncer stream, GET
// <url>/v1/decisions/stream?startup=true|false with the header X-Api-Key,
// and turns the decisions it can enforce (scope Ip or Range, a type in
// Config.Types) into prefixes.
//
// The LAPI is not trusted to be well behaved. The body is decoded as a
// stream, one decision at a time: a decision whose JSON text exceeds
// MaxDecisionBytes, more than Config.MaxDecisions decisions in one answer,
// a body nested deeper than the stream format, or an answer that takes
// longer than Config.Timeout end the pull with an error. Memory held by a
// pull is therefore bounded by what is kept, not by what the server sends:
// at worst Config.MaxDecisions kept decisions (about 200 bytes each plus
// their strings, each string at most MaxDecisionBytes in total per
// decision) and one decision's text being decoded (MaxDecisionBytes);
// with the defaults (100,000 decisions, 64 KiB per decision) that is a few
// tens of megabytes in the worst case and about 25 MB for 100,000 typical
// decisions.
//
// The API key is sent only in the X-Api-Key header: it is never logged,
// never put in a URL, and never part of an error text.
package crowdsec
