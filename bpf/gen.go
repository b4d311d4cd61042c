package bpf

//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target bpfel -type counter -type counter_block -type rule_block -type lpm_v4_key -type lpm_v6_key -type prefix_bucket -type prefix_slot -type sample_state -type ban_v4_key -type ban_v6_key -type ban_value -type ban_bucket -type ban_block -type fs_table -type fs_rule -type fs_count -type fs_cell xdpDrop xdp_drop.c
