package xdp_drop

import "github.com/xdp-drop/xdp_drop/bpf"

// viewedOrigin is an origin of bans a console view shows: the instance it
// observes owns the feed, so the view reads what is in force from the
// kernel and counts nothing of its own.
type viewedOrigin struct {
	name   string // OriginCrowdSec, OriginDetect
	origin uint8  // bpf.BanOriginCrowdSec, bpf.BanOriginDetect
	dryRun bool   // its bans would drop (action would_drop)
}

// viewedOrigins are the origins c configures, as a view shows them.
func viewedOrigins(c *BansConfig, bansDry bool) []viewedOrigin {
	var out []viewedOrigin
	if c.CrowdSec != nil {
		out = append(out, viewedOrigin{OriginCrowdSec, bpf.BanOriginCrowdSec, bansDry})
	}
	if d := c.Detect; d != nil {
		// Detection starts in dry run: only dry_run = false bans.
		out = append(out, viewedOrigin{OriginDetect, bpf.BanOriginDetect, bansDry || d.DryRun == nil || *d.DryRun})
	}
	return out
}
