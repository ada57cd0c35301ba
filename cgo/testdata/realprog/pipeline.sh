# A shell pipeline that forks: pipelines of sort, uniq, awk, sed, tr and wc,
# subshells, command and process substitution, background jobs and xargs.
# Run by bash with LC_ALL=C; the output is deterministic. Forked subshells
# (no exec) record whether the preload library is mapped into them.
set -euo pipefail

check_preload() { # role: appends "role mapped|absent" to $REALPROG_CHECK
	[ -n "${REALPROG_CHECK:-}" ] || return 0
	local state=absent line
	while IFS= read -r line; do
		if [[ $line == *"$REALPROG_LIB" ]]; then
			state=mapped
			break
		fi
	done </proc/self/maps
	echo "$1 $state" >>"$REALPROG_CHECK"
}

check_preload bash-main

echo "== buckets"
seq 1 40000 | awk '{ print $1 % 97, $1 }' | sort -k1,1n -k2,2n |
	awk '{ s[$1] += $2; n[$1]++ } END { for (k in s) print k, n[k], s[k] }' |
	sort -n | sed -e 's/^/bucket /' -e 's/ \([0-9]*\)$/ sum=\1/' | awk 'NR <= 12'

echo "== words"
for i in $(seq 1 600); do echo "w$((i * 7 % 113))"; done | sort | uniq -c | sort -k1,1nr -k2,2 | awk 'NR <= 5'

echo "== subshells"
(
	check_preload subshell
	for i in 1 2 3 4 5; do
		(echo "sub $i $(echo $((i * i)) | tr 0-9 a-j)")
	done
)

echo "== pipeline stage"
{
	check_preload pipeline-stage
	seq 1 5000
} | tr 0-9 a-j | sort -r | uniq | awk 'NR % 1000 == 1' | wc -l

echo "== process substitution"
paste -d' ' <(seq 1 5) <(seq 1 5 | sed 's/$/x/') <(seq 5 -1 1 | awk '{ print $1 * 3 }')
while read -r n; do echo $((n * n)); done < <(seq 1 200) | paste -sd+ | tr + ' ' |
	awk '{ for (i = 1; i <= NF; i++) s += $i } END { print s }'

echo "== command substitution in a loop"
acc=""
for i in $(seq 1 150); do
	acc="$acc$(printf '%03d' "$((i * 37 % 1000))")"
done
echo "${#acc} $(echo "$acc" | cksum)"

echo "== background jobs"
tmp=$(mktemp -d)
for i in 1 2 3 4 5 6; do
	(seq 1 $((i * 3000)) | sort -R --random-source=<(yes "$i") | sort -n | tail -n 1 >"$tmp/out.$i") &
done
wait
cat "$tmp"/out.*
rm -rf "$tmp"

echo "== xargs"
seq 1 64 | xargs -n 8 -P 2 sh -c 'echo $(( $(printf "%s+" "$@") 0 ))' sh | sort -n | tr '\n' ' '
echo

echo "== big sort"
seq 1 200000 | awk '{ printf "%08x %d\n", ($1 * 2654435761) % 4294967296, $1 }' |
	sort -S 8M --parallel=2 | awk 'NR % 40000 == 0' | cut -d' ' -f2
seq 1 100000 | sed 's/\(.\)\(.\)/\2\1/' | sort -u | md5sum | cut -c1-16

echo "== done"
