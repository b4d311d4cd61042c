package main

//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target bpfel -type bench_cfg limitBench limitbench.c
