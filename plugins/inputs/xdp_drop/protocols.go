package xdp_drop

import (
	"strconv"
	"strings"
)

// protocolKeywords holds the IANA "Assigned Internet Protocol Numbers"
// keywords, lower case, spaces as '-'. Numbers without a keyword are absent
// and are reported as their decimal number.
var protocolKeywords = map[uint8]string{
	0: "hopopt", 1: "icmp", 2: "igmp", 3: "ggp", 4: "ipv4", 5: "st", 6: "tcp", 7: "cbt",
	8: "egp", 9: "igp", 10: "bbn-rcc-mon", 11: "nvp-ii", 12: "pup", 13: "argus", 14: "emcon",
	15: "xnet", 16: "chaos", 17: "udp", 18: "mux", 19: "dcn-meas", 20: "hmp", 21: "prm",
	22: "xns-idp", 23: "trunk-1", 24: "trunk-2", 25: "leaf-1", 26: "leaf-2", 27: "rdp",
	28: "irtp", 29: "iso-tp4", 30: "netblt", 31: "mfe-nsp", 32: "merit-inp", 33: "dccp",
	34: "3pc", 35: "idpr", 36: "xtp", 37: "ddp", 38: "idpr-cmtp", 39: "tp++", 40: "il",
	41: "ipv6", 42: "sdrp", 43: "ipv6-route", 44: "ipv6-frag", 45: "idrp", 46: "rsvp",
	47: "gre", 48: "dsr", 49: "bna", 50: "esp", 51: "ah", 52: "i-nlsp", 53: "swipe",
	54: "narp", 55: "min-ipv4", 56: "tlsp", 57: "skip", 58: "ipv6-icmp", 59: "ipv6-nonxt",
	60: "ipv6-opts", 62: "cftp", 64: "sat-expak", 65: "kryptolan", 66: "rvd", 67: "ippc",
	69: "sat-mon", 70: "visa", 71: "ipcv", 72: "cpnx", 73: "cphb", 74: "wsn", 75: "pvp",
	76: "br-sat-mon", 77: "sun-nd", 78: "wb-mon", 79: "wb-expak", 80: "iso-ip", 81: "vmtp",
	82: "secure-vmtp", 83: "vines", 84: "ttp", 85: "nsfnet-igp", 86: "dgp", 87: "tcf",
	88: "eigrp", 89: "ospfigp", 90: "sprite-rpc", 91: "larp", 92: "mtp", 93: "ax.25",
	94: "ipip", 95: "micp", 96: "scc-sp", 97: "etherip", 98: "encap", 100: "gmtp",
	101: "ifmp", 102: "pnni", 103: "pim", 104: "aris", 105: "scps", 106: "qnx", 107: "a/n",
	108: "ipcomp", 109: "snp", 110: "compaq-peer", 111: "ipx-in-ip", 112: "vrrp", 113: "pgm",
	115: "l2tp", 116: "ddx", 117: "iatp", 118: "stp", 119: "srp", 120: "uti", 121: "smp",
	122: "sm", 123: "ptp", 124: "isis-over-ipv4", 125: "fire", 126: "crtp", 127: "crudp",
	128: "sscopmce", 129: "iplt", 130: "sps", 131: "pipe", 132: "sctp", 133: "fc",
	134: "rsvp-e2e-ignore", 135: "mobility-header", 136: "udplite", 137: "mpls-in-ip",
	138: "manet", 139: "hip", 140: "shim6", 141: "wesp", 142: "rohc", 143: "ethernet",
	144: "aggfrag", 145: "nsh",
}

// protocolAliases are other spellings operators use, accepted in drop lists.
var protocolAliases = map[string]uint8{
	"icmpv6": 58, "icmp6": 58, "ipv6-nonext": 59, "ospf": 89, "iptm": 84, "isis": 124,
	"ipencap": 4, "mobility": 135,
}

var protocolNumbers = func() map[string]uint8 {
	m := make(map[string]uint8, len(protocolKeywords)+len(protocolAliases))
	for n, k := range protocolKeywords {
		m[k] = n
	}
	for k, n := range protocolAliases {
		m[k] = n
	}
	return m
}()

// protocolTags holds the protocol tag value of every IP protocol number.
var protocolTags = func() [256]string {
	var t [256]string
	for i := range t {
		if k, ok := protocolKeywords[uint8(i)]; ok {
			t[i] = k
		} else {
			t[i] = strconv.Itoa(i)
		}
	}
	return t
}()

// protocolTag is the metric tag of IP protocol n: its keyword, or its number.
func protocolTag(n uint8) string { return protocolTags[n] }

// lookupProtocol resolves a protocol name (keyword or alias, any case) or a
// decimal number to its number.
func lookupProtocol(s string) (uint8, bool) {
	if n, err := strconv.ParseUint(s, 10, 8); err == nil {
		return uint8(n), true
	}
	n, ok := protocolNumbers[strings.ToLower(s)]
	return n, ok
}
