package bpf

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Features are what a program of xdp_drop.c is compiled with. Each set in
// programVariants is a program of its own, so that a program runs, and
// keeps registers for, the code of its features only.
type Features uint8

const (
	// FeatureRules: the policy has rules.
	FeatureRules Features = 1 << iota
	// FeatureMultiBuffer: frames may span several buffers (xdp.frags),
	// for devices whose MTU needs it.
	FeatureMultiBuffer
	// FeatureSampling: frames are sampled to a ring (Policy.Sample).
	FeatureSampling
	// FeatureLimit: a rule is a limit rule, run by the limiter; it comes
	// with FeatureRules only.
	FeatureLimit
	// FeatureBans: timed bans of sources (Policy.Bans), checked before the
	// rules; without it the programs have no ban code.
	FeatureBans
)

// featureNames name the features in String, lowest bit first.
var featureNames = []string{"rules", "multi-buffer", "sampling", "limit", "bans"}

// String names the features joined by "+", "none" for the empty set.
func (f Features) String() string {
	var names []string
	for i, name := range featureNames {
		if f&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if rest := f &^ (1<<len(featureNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("0x%x", uint8(rest)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// programVariants is the one table of the programs in xdp_drop.c: the
// program compiled for each feature set. A set not in it has no program.
var programVariants = map[Features]string{
	0:                                    xdpDropProgXdpDrop,
	FeatureMultiBuffer:                   xdpDropProgXdpDropFrags,
	FeatureRules:                         xdpDropProgXdpDropRules,
	FeatureRules | FeatureMultiBuffer:    xdpDropProgXdpDropRulesFrags,
	FeatureSampling:                      xdpDropProgXdpDropSample,
	FeatureSampling | FeatureMultiBuffer: xdpDropProgXdpDropSampleFrags,
	FeatureRules | FeatureSampling:       xdpDropProgXdpDropRulesSample,
	FeatureRules | FeatureSampling | FeatureMultiBuffer:                xdpDropProgXdpDropRulesSampleFrags,
	FeatureRules | FeatureLimit:                                        xdpDropProgXdpDropLimits,
	FeatureRules | FeatureLimit | FeatureMultiBuffer:                   xdpDropProgXdpDropLimitsFrags,
	FeatureRules | FeatureLimit | FeatureSampling:                      xdpDropProgXdpDropLimitsSample,
	FeatureRules | FeatureLimit | FeatureSampling | FeatureMultiBuffer: xdpDropProgXdpDropLimitsSampleFrags,
	FeatureBans:                                                                      xdpDropProgXdpDropBans,
	FeatureBans | FeatureMultiBuffer:                                                 xdpDropProgXdpDropBansFrags,
	FeatureBans | FeatureRules:                                                       xdpDropProgXdpDropRulesBans,
	FeatureBans | FeatureRules | FeatureMultiBuffer:                                  xdpDropProgXdpDropRulesBansFrags,
	FeatureBans | FeatureSampling:                                                    xdpDropProgXdpDropSampleBans,
	FeatureBans | FeatureSampling | FeatureMultiBuffer:                               xdpDropProgXdpDropSampleBansFrags,
	FeatureBans | FeatureRules | FeatureSampling:                                     xdpDropProgXdpDropRulesSampleBans,
	FeatureBans | FeatureRules | FeatureSampling | FeatureMultiBuffer:                xdpDropProgXdpDropRulesSampleBansFrags,
	FeatureBans | FeatureRules | FeatureLimit:                                        xdpDropProgXdpDropLimitsBans,
	FeatureBans | FeatureRules | FeatureLimit | FeatureMultiBuffer:                   xdpDropProgXdpDropLimitsBansFrags,
	FeatureBans | FeatureRules | FeatureLimit | FeatureSampling:                      xdpDropProgXdpDropLimitsSampleBans,
	FeatureBans | FeatureRules | FeatureLimit | FeatureSampling | FeatureMultiBuffer: xdpDropProgXdpDropLimitsSampleBansFrags,
}

// featuresOf are the features of policy's program, single-buffer: the
// multi-buffer one is chosen per device (Attach).
func featuresOf(policy Policy) Features {
	var f Features
	if len(policy.Rules) > 0 {
		f |= FeatureRules
	}
	if policy.Sample.On() {
		f |= FeatureSampling
	}
	if policy.hasLimits() {
		f |= FeatureLimit
	}
	if withFlowSpec(policy).Bans.On {
		f |= FeatureBans
	}
	return f
}

// programOf names the program compiled for the features f.
func programOf(f Features) (string, error) {
	if name, ok := programVariants[f]; ok {
		return name, nil
	}
	have := slices.Sorted(maps.Keys(programVariants))
	names := make([]string, len(have))
	for i, h := range have {
		names[i] = h.String()
	}
	return "", fmt.Errorf("no XDP program is compiled with the features %s: the programs have %s", f, strings.Join(names, ", "))
}
