package xdp_drop

// The tests name the schema's functions as the package did before it
// exported them.
var classProtocol = ClassProtocol
