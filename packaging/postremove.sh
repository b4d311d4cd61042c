#!/bin/sh
# telegraf-xdp-drop post-remove (deb: remove, purge, upgrade...; rpm: $1 = 0
# removal, 1 upgrade). Detaches nothing: pins left in the pin directory
# (counters, and with keep_attached the attachment) are reported, not removed.
set -e

GROUP=@GROUP@
NOTE=/run/telegraf-xdp-drop-bpffs-mode
BPFFS=/sys/fs/bpf
PINS=$BPFFS/xdp_drop

case "$1" in
remove | 0) remove=yes purge= ;;
purge) remove= purge=yes ;;
*) exit 0 ;;
esac
[ "$1" = 0 ] && purge=yes # rpm has no purge: an erase is the last step

if [ -n "$remove" ]; then
	# The link in Telegraf's config directory went with the package.
	echo "telegraf-xdp-drop: removed from Telegraf's config; a running Telegraf runs the removed binary until it reloads or restarts (systemctl reload telegraf), which stops it and releases its interfaces"
	if [ -d "$PINS" ]; then
		if rmdir "$PINS" 2>/dev/null; then
			:
		else
			echo "telegraf-xdp-drop: $PINS still holds pins (counters, or attachments kept with keep_attached), left in place; rm -r $PINS releases them"
		fi
	fi
	# A handover process still running keeps its sockets open and releases at
	# its timeout; only the names go.
	rm -rf /run/telegraf-xdp-drop
fi

# reach says who reaches the pins left in $PINS: through $BPFFS, which
# others may pass only with its o+x, then by $PINS's own mode.
reach() {
	fs=$(stat -c %a "$BPFFS")
	pins=$(stat -c %a "$PINS")
	owner=$(stat -c %U:%G "$PINS")
	group=$(stat -c %G "$PINS")
	if [ $((0$fs & 1)) = 0 ]; then
		echo "only root reaches them now: $BPFFS is $fs"
	elif [ $((0$pins & 5)) != 0 ]; then
		echo "every user reaches them: $BPFFS is $fs and $PINS is $pins $owner"
	elif [ $((0$pins & 050)) != 0 ]; then
		echo "root and the group $group (the service user's) still reach them: $BPFFS is $fs, which others may pass, and $PINS is $pins $owner"
	else
		echo "only root reaches them now: $PINS is $pins $owner"
	fi
}

if [ -n "$purge" ]; then
	# Take back the search permission bpffs-access added to the BPF
	# filesystem's root, pins or not: root reaches them all the same.
	if [ -e "$NOTE" ]; then
		if [ "$(stat -f -c %T "$BPFFS" 2>/dev/null)" = bpf_fs ]; then
			was=$(cat "$NOTE")
			now=$(stat -c %a "$BPFFS")
			# Only where the mode is still what the package made of it: a mode
			# changed since is someone else's choice, kept.
			if [ "$((0$now))" = "$((0$was | 1))" ]; then
				chmod o-x "$BPFFS"
				echo "telegraf-xdp-drop: took back the search permission for others on $BPFFS that the package added (chmod o-x): it is $(stat -c %a "$BPFFS") again"
			else
				echo "telegraf-xdp-drop: $BPFFS is $now, changed since the package made it $(printf %o $((0$was | 1))) from $was: left as it is; chmod $was $BPFFS restores the mode it had before the package"
			fi
		fi
		rm -f "$NOTE"
	fi
	if [ -d "$PINS" ]; then
		rmdir "$PINS" 2>/dev/null ||
			echo "telegraf-xdp-drop: $PINS still holds pins, left in place ($(reach)); rm -r $PINS releases them"
	fi
fi
# The group $GROUP is kept: Telegraf's user may belong to it, and removing a
# group could leave files owned by a number reused later.
: "$GROUP"
exit 0
