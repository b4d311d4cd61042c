package bpf

//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target bpfel -type counter -type counter_block xdpDrop xdp_drop.c
