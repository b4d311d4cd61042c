package bpf

// WithoutMultiBuffer makes the programs until restore load as on a kernel
// without multi-buffer XDP (before 5.18): Attach cannot switch to it.
func WithoutMultiBuffer() (restore func()) {
	old := haveMultiBuffer
	haveMultiBuffer = func() error { return ErrNoMultiBuffer }
	return func() { haveMultiBuffer = old }
}
