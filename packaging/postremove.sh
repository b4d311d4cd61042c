#!/bin/sh
# telegraf-xdp-drop post-remove (deb: remove, purge, upgrade...; rpm: $1 = 0
# removal, 1 upgrade). Detaches nothing: pins left in the pin directory
# (counters, and with keep_attached the attachment) are reported, not removed.
set -e

GROUP=@GROUP@
STATE=/var/lib/telegraf-xdp-drop
BPFFS=/sys/fs/bpf
PINS=$BPFFS/xdp_drop

case "$1" in
remove | purge | 0) ;;
*) exit 0 ;;
esac

if [ -d "$PINS" ]; then
	if rmdir "$PINS" 2>/dev/null; then
		:
	else
		echo "telegraf-xdp-drop: $PINS still holds pins (counters, or attachments kept with keep_attached), left in place; rm -r $PINS releases them"
	fi
fi
if [ -e "$STATE/bpffs-mode" ] && [ ! -d "$PINS" ]; then
	chmod "$(cat "$STATE/bpffs-mode")" "$BPFFS" 2>/dev/null || true
	rm -f "$STATE/bpffs-mode"
fi
rmdir "$STATE" 2>/dev/null || true
# A handover process still running keeps its sockets open and releases at
# its timeout; only the names go.
rm -rf /run/telegraf-xdp-drop
# The group $GROUP is kept: Telegraf's user may belong to it, and removing a
# group could leave files owned by a number reused later.
: "$GROUP"
exit 0
