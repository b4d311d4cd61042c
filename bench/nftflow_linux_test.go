//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/xdp-drop/xdp_drop/internal/testing/testns"
)

// The translation of 1,024 rules, and of every kind the translator writes,
// loads into nftables (in a namespace of the test's own) as written: nft
// lists as many rules as were written.
func TestNftRulesetLoads(t *testing.T) {
	ns := testns.New(t)
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv(testns.RequireEnv) == "1" {
			t.Fatalf("nft not found, and %s=1 forbids skipping", testns.RequireEnv)
		}
		t.Skip("nft not found: apt-get install nftables")
	}
	rules := benchFlowRules(1024)
	want := len(rules)
	for i, tc := range nftCases {
		r := tc.rule
		r.ID = fmt.Sprintf("case%d", i)
		rules = append(rules, r)
		want += len(tc.want)
	}
	for _, c := range []nftChain{
		{family: "netdev", table: "fsnetdev", chain: "flowspec", hook: "ingress", device: testns.Dev},
		{family: "inet", table: "fsinet", chain: "flowspec", hook: "prerouting"},
	} {
		text, err := nftRuleset(c, rules)
		if err != nil {
			t.Fatal(err)
		}
		cmd := ns.Exec("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: nft -f: %v\n%s", c.family, err, out)
		}
		out, err := ns.Exec("nft", "list", "chain", c.family, c.table, c.chain).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v\n%s", err, out)
		}
		// Every rule ends in its verdict or statement, one a line.
		got := 0
		for _, l := range strings.Split(string(out), "\n") {
			for _, end := range []string{" drop", " accept", " counter packets 0 bytes 0"} {
				if strings.HasSuffix(l, end) {
					got++
					break
				}
			}
		}
		if got != want {
			t.Errorf("%s: nft lists %d rules, want %d\n%s", c.family, got, want, out[len(out)-min(len(out), 2000):])
		}
	}
}
