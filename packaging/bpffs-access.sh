#!/bin/sh
# Lets telegraf-xdp-drop's service user (group @GROUP@) pass through the BPF
# filesystem's root to its pin directory, /sys/fs/bpf/xdp_drop. Run by the
# post-install script and, since the BPF filesystem starts afresh at every
# boot, by telegraf-xdp-drop-bpffs.service before Telegraf starts.
#
# It only adds: search permission for others on /sys/fs/bpf when that lacks
# it (systemd mounts it 1700), never taking away what others had. What it
# added is noted in /run, which lives exactly as long as this mount, so that
# purging the package takes back that and nothing else.
set -e

BPFFS=/sys/fs/bpf
PINS=$BPFFS/xdp_drop
GROUP=@GROUP@
NOTE=/run/telegraf-xdp-drop-bpffs-mode

if [ "$(stat -f -c %T "$BPFFS" 2>/dev/null)" != bpf_fs ]; then
	# Nothing to reach, nothing to change: not even a mode on what is not ours.
	echo "telegraf-xdp-drop: no BPF filesystem on $BPFFS, so pin_path = \"$PINS\" attaches without pins; to pin, as root run: mount -t bpf bpf $BPFFS (with systemd: systemctl start sys-fs-bpf.mount), then /usr/lib/telegraf-xdp-drop/bpffs-access"
	exit 0
fi
mode=$(stat -c %a "$BPFFS")
if [ $((0$mode & 1)) = 0 ]; then
	chmod o+x "$BPFFS"
	[ -e "$NOTE" ] || echo "$mode" >"$NOTE"
	echo "telegraf-xdp-drop: $BPFFS was $mode: added search permission for others (chmod o+x) so that the service user reaches $PINS; purging the package takes it back"
fi
if [ ! -d "$PINS" ]; then
	install -d -m 0770 -o root -g "$GROUP" "$PINS"
fi
