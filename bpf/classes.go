package bpf

// Class is a counter class of the XDP program: an IP family and protocol, or
// one of the classes that carry no protocol (truncated frames, ARP, ...).
type Class uint16

// ClassCount is the number of counter classes.
const ClassCount = int(xdpDropClassIdxCLASS_COUNT)

// Classes without an IP protocol number.
const (
	ClassIPv4Truncated  = Class(xdpDropClassIdxCLASS_IPV4TRUNCATED)
	ClassIPv6Truncated  = Class(xdpDropClassIdxCLASS_IPV6TRUNCATED)
	ClassL2ARP          = Class(xdpDropClassIdxCLASS_L2ARP)
	ClassL2VLANOverflow = Class(xdpDropClassIdxCLASS_L2VLAN_OVERFLOW)
	ClassL2Other        = Class(xdpDropClassIdxCLASS_L2OTHER)
	ClassL2Truncated    = Class(xdpDropClassIdxCLASS_L2TRUNCATED)
)

// Family is the address family a frame was classed under.
type Family uint8

const (
	FamilyIPv4 Family = iota
	FamilyIPv6
	FamilyL2
)

func (f Family) String() string {
	switch f {
	case FamilyIPv4:
		return "ipv4"
	case FamilyIPv6:
		return "ipv6"
	default:
		return "l2"
	}
}

// IPv4Class is the class of IPv4 frames carrying IP protocol proto.
func IPv4Class(proto uint8) Class {
	return Class(xdpDropClassIdxCLASS_IPV4) + Class(proto)
}

// IPv6Class is the class of IPv6 frames whose extension header chain ends in proto.
func IPv6Class(proto uint8) Class {
	return Class(xdpDropClassIdxCLASS_IPV6) + Class(proto)
}

// Family returns the family the class belongs to.
func (c Class) Family() Family {
	switch {
	case c < Class(xdpDropClassIdxCLASS_IPV6), c == ClassIPv4Truncated:
		return FamilyIPv4
	case c < ClassIPv4Truncated, c == ClassIPv6Truncated:
		return FamilyIPv6
	default:
		return FamilyL2
	}
}

// Protocol returns the IP protocol of an IP class; ok is false for classes
// that carry none.
func (c Class) Protocol() (proto uint8, ok bool) {
	if c >= ClassIPv4Truncated {
		return 0, false
	}
	return uint8(c % 256), true
}

// Name returns the protocol tag of a class that carries no IP protocol.
func (c Class) Name() string {
	switch c {
	case ClassIPv4Truncated, ClassIPv6Truncated, ClassL2Truncated:
		return "truncated"
	case ClassL2ARP:
		return "arp"
	case ClassL2VLANOverflow:
		return "vlan_overflow"
	case ClassL2Other:
		return "other"
	default:
		return ""
	}
}
