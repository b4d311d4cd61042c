#!/bin/sh
# telegraf-xdp-drop post-install (deb: configure; rpm: $1 = 1 install, 2 upgrade).
# Only members of @GROUP@ may run the binary, which carries @CAPS@.
set -e

BIN=/usr/bin/telegraf-xdp-drop
VERSION=@VERSION@
GROUP=@GROUP@
CAPS=@CAPS@

case "$1" in
configure) upgrade=${2:+yes} ;;
1) upgrade= ;;
2) upgrade=yes ;;
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

# The pin directory (pin_path), and search permission on the BPF
# filesystem's root to reach it, added only where missing.
/usr/lib/telegraf-xdp-drop/bpffs-access

# An upgrade replaced the binary, but Telegraf runs the old one until it
# restarts it. A reload is gap-free (the new binary takes the attachments
# over in place), so reload a Telegraf that systemd runs, and say what
# happened either way.
if [ -n "$upgrade" ]; then
	if [ ! -d /run/systemd/system ]; then
		echo "telegraf-xdp-drop: not under systemd: a running Telegraf keeps the previous $BIN until it reloads (SIGHUP, or its service manager's reload), which takes the attachments over without a gap"
	elif ! systemctl is-active --quiet telegraf 2>/dev/null; then
		echo "telegraf-xdp-drop: telegraf.service is not active: it runs $BIN $VERSION when it starts"
	elif systemctl try-reload-or-restart telegraf; then
		echo "telegraf-xdp-drop: reloaded telegraf (systemctl try-reload-or-restart telegraf): it now runs $BIN $VERSION"
	else
		echo "telegraf-xdp-drop: reloading telegraf failed: it runs the previous $BIN until it reloads; run systemctl reload telegraf"
	fi
fi
exit 0
