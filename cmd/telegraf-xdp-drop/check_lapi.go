package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/quote"
	"github.com/xdp-drop/xdp_drop/plugins/inputs/xdp_drop"
)

// checkLAPIUsage is the -check-lapi flag's help.
const checkLAPIUsage = "with -check: ask the [bans.crowdsec] LAPI once, with the bouncer's key, whether it is reachable and takes the key " +
	"(a decisions query of a documentation address, which takes nothing from the instance's stream); exit 1 when not"

// lapiProbeTimeout bounds the one request of -check-lapi.
const lapiProbeTimeout = 10 * time.Second

// checkLAPI asks the LAPI once whether it answers and takes the key, and
// says which on out: reachable, unauthorized or unreachable. It asks
// /v1/decisions for one documentation address, not the stream: a pull of
// the stream with the instance's key would take its changes from it.
func checkLAPI(plugin *xdp_drop.XDPDrop, out io.Writer) bool {
	base, key, tls, ok := plugin.LAPIAccess()
	if !ok {
		fmt.Fprintln(out, "lapi: no [bans.crowdsec] feed to ask")
		return false
	}
	url := strings.TrimRight(base, "/") + "/v1/decisions?ip=192.0.2.1"
	shown := quote.Value(base)
	ctx, cancel := context.WithTimeout(context.Background(), lapiProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(out, "lapi %s: unreachable: %v\n", shown, err)
		return false
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("User-Agent", "xdp-drop/check")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tls, Proxy: http.ProxyFromEnvironment}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(out, "lapi %s: unreachable: %s; check the url and that the LAPI runs (cscli lapi status on its host)\n", shown, quote.Line(strings.ReplaceAll(err.Error(), key, "[key]")))
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		fmt.Fprintf(out, "lapi %s: reachable, the bouncer key is accepted\n", shown)
		return true
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		fmt.Fprintf(out, "lapi %s: reachable, but the bouncer key is refused (HTTP %d, unauthorized); create one with \"cscli bouncers add xdp-drop-<host>\" on the LAPI's host and set api_key_file to it\n", shown, resp.StatusCode)
	default:
		fmt.Fprintf(out, "lapi %s: reachable, but it answered HTTP %d: not a CrowdSec LAPI at this url?\n", shown, resp.StatusCode)
	}
	return false
}
