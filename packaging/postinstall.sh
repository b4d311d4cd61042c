#!/bin/sh
# telegraf-xdp-drop post-install (deb: configure; rpm: $1 = 1 install, 2 upgrade).
# Only members of @GROUP@ may run the binary, which carries @CAPS@.
set -e

BIN=/usr/bin/telegraf-xdp-drop
GROUP=@GROUP@
CAPS=@CAPS@
STATE=/var/lib/telegraf-xdp-drop
BPFFS=/sys/fs/bpf

case "$1" in
configure | 1 | 2) ;;
*) exit 0 ;;
esac

# Telegraf's own package creates its group the same way and keeps one that
# exists, so installing this first is fine. A group with no members lets
# no one run the binary.
if ! getent group "$GROUP" >/dev/null; then
	groupadd --system "$GROUP"
	echo "telegraf-xdp-drop: created the system group $GROUP; Telegraf's service user must be a member to run $BIN"
fi

# chown drops file capabilities, so the group comes first.
chown root:"$GROUP" "$BIN"
chmod 0750 "$BIN"
setcap "$CAPS" "$BIN"

# The handover sockets' directory (also in the tmpfiles entry, for boots).
install -d -m 0770 -o root -g "$GROUP" /run/telegraf-xdp-drop

# The pin directory (pin_path) on the BPF filesystem, writable by the group.
# Remember the filesystem root's mode before tmpfiles opens it for
# traversal, so that removing the package restores it.
if [ "$(stat -f -c %T "$BPFFS" 2>/dev/null)" = bpf_fs ]; then
	mkdir -p "$STATE"
	[ -e "$STATE/bpffs-mode" ] || stat -c %a "$BPFFS" >"$STATE/bpffs-mode"
	if command -v systemd-tmpfiles >/dev/null 2>&1; then
		systemd-tmpfiles --create /usr/lib/tmpfiles.d/telegraf-xdp-drop.conf
	else
		chmod o+x,g+x "$BPFFS"
		mkdir -p "$BPFFS/xdp_drop"
		chown root:"$GROUP" "$BPFFS/xdp_drop"
		chmod 0770 "$BPFFS/xdp_drop"
	fi
else
	echo "telegraf-xdp-drop: no BPF filesystem on $BPFFS; pin_path needs one (mount -t bpf bpf $BPFFS, then systemd-tmpfiles --create /usr/lib/tmpfiles.d/telegraf-xdp-drop.conf)"
fi
exit 0
