#!/usr/bin/env bash
# scripts/slurm/local_cluster.sh - a real single-node SLURM cluster on this machine, for the live test tier.
#
#   scripts/slurm/local_cluster.sh start    # (root, Debian/Ubuntu) install if missing, configure, start, check
#   scripts/slurm/local_cluster.sh stop     # stop the daemons this script started (and only those)
#   scripts/slurm/local_cluster.sh status   # sinfo, and the daemons this script started
#
# One node (this host, `hostname -s`) in one partition `debug`; munged, slurmctld and slurmd started directly (no
# systemd, no cgroups: proctrack/linuxproc, task/none), no accounting database (the sweep needs none). `start` is
# idempotent: daemons already running with the same configuration are left alone. `stop` stops only the daemons
# whose PIDs `start` recorded in $STATE_DIR/started, so a cluster that was running before is left running, and
# removes the configuration it wrote once no slurmctld runs (sinfo then fails at once instead of after ~10 s).
#
# Knobs (environment):
#   CRED_EXPIRE=10   job credential lifetime in seconds. SLURM holds a requeued job for this long + 1 s before it may
#                    start again (SLURM's default is 120 s: minutes per requeue). Low here for fast tests.
#   NODE_CPUS        CPUs of the node (default: nproc)
#   NODE_MEM_MB      RealMemory of the node (default: 80% of MemTotal)
#   FAKE_GPUS=N      declare N GPUs (GRES gpu backed by /dev/null clones) so that --gpus-per-node / --gres=gpu:N are
#                    accepted and jobs get CUDA_VISIBLE_DEVICES; JAX sees no GPU in them (default 0)
#   KILL_WAIT=30     seconds between SIGTERM and SIGKILL (SLURM's default)
#   SKIP_INSTALL=1   do not run apt-get
#
# Logs: /var/log/slurm/{slurmctld,slurmd}.log, /var/log/munge/munged.log. Measured: SLURM 22.05.8 on Debian 12,
# about a minute for a fresh install and start.
set -euo pipefail

CRED_EXPIRE=${CRED_EXPIRE:-10}
FAKE_GPUS=${FAKE_GPUS:-0}
KILL_WAIT=${KILL_WAIT:-30}
HOST=$(hostname -s)
NODE_CPUS=${NODE_CPUS:-$(nproc)}
NODE_MEM_MB=${NODE_MEM_MB:-$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)}
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
MARK="# Written by qc scripts/slurm/local_cluster.sh"
STATE_DIR=/run/qc-local-slurm
DAEMONS="munged:/run/munge/munged.pid slurmctld:/run/slurmctld.pid slurmd:/run/slurmd.pid"

log() { echo "[local_cluster] $*"; }
die() {
    echo "[local_cluster] error: $*" >&2
    exit 1
}

pid_of() { # pid_of NAME PIDFILE: the PID in PIDFILE when it is a live process called NAME, else nothing
    local pid
    [ -s "$2" ] || return 0
    pid=$(cat "$2")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]; then
        echo "$pid"
    fi
}

wait_until() { # wait_until SECONDS WHAT COMMAND...: poll COMMAND every 0.5 s
    local secs=$1 what=$2 i
    shift 2
    for ((i = 0; i < secs * 2; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "timed out after ${secs} s waiting for $what ($*)"
}

stop_one() { # stop_one NAME: SIGTERM the daemon NAME if this script started it (the recorded PID), wait for it
    local line pid i
    line=$(grep "^$1 " "$STATE_DIR/started" 2>/dev/null || true)
    [ -n "$line" ] || return 0
    pid=${line#* }
    if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]; then
        log "stopping $1 (pid $pid)"
        kill "$pid"
        for ((i = 0; i < 60; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -0 "$pid" 2>/dev/null && die "$1 (pid $pid) did not stop"
    fi
    sed -i "/^$1 /d" "$STATE_DIR/started"
    [ "$1" = munged ] || rm -f "/run/$1.pid" # slurmctld runs as SlurmUser and cannot remove its own
}

stop_started() { # slurmd first, munged last (the others authenticate through it)
    if [ ! -s "$STATE_DIR/started" ]; then
        log "nothing to stop (no daemon started by this script is recorded)"
        return 0
    fi
    stop_one slurmd
    stop_one slurmctld
    stop_one munged
    # Without its configuration, sinfo says at once that no cluster answers (with it, it tries for about 10 s).
    if ! pgrep -x slurmctld >/dev/null && grep -qxF "$MARK" "$CONF" 2>/dev/null; then
        rm -f "$CONF" "$GRES_CONF"
    fi
    log "stopped"
}

started() { # started NAME PIDFILE: record the daemon's PID as started by this script
    local pid
    pid=$(pid_of "$1" "$2")
    [ -n "$pid" ] || die "$1 did not start (see its log under /var/log)"
    echo "$1 $pid" >>"$STATE_DIR/started"
}

case "${1:-start}" in
stop)
    stop_started
    exit 0
    ;;
status)
    for d in $DAEMONS; do echo "${d%%:*}: $(pid_of "${d%%:*}" "${d#*:}")"; done
    [ -f "$STATE_DIR/started" ] && echo "started by this script: $(tr '\n' ' ' <"$STATE_DIR/started")"
    sinfo
    exit 0
    ;;
start) ;;
*) die "usage: $0 [start|stop|status]" ;;
esac

[ "$(id -u)" = 0 ] || die "run as root (it installs packages, writes /etc/slurm and starts daemons)"
install -d -m 0755 "$STATE_DIR"

# ---------------------------------------------------------------------------------------------- packages
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    missing=()
    for p in munge slurmctld slurmd slurm-client; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q "${missing[@]}" >/dev/null
    fi
fi
for b in munged slurmctld slurmd sinfo sbatch srun scontrol; do command -v "$b" >/dev/null || die "$b not found"; done
getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >>/etc/hosts # slurmd resolves its own NodeName

# ---------------------------------------------------------------------------------------------- configuration
if [ -f "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script: not touching a cluster that is not ours"
fi
GRES_LINE="" NODE_GRES="" GRES_TYPES=""
if [ "$FAKE_GPUS" -gt 0 ]; then
    install -d -m 0755 /var/lib/qc-fake-gpu
    for ((i = 0; i < FAKE_GPUS; i++)); do # slurmd wants character devices
        [ -c "/var/lib/qc-fake-gpu/nvidia$i" ] || mknod -m 0666 "/var/lib/qc-fake-gpu/nvidia$i" c 1 3
    done
    GRES_LINE="NodeName=$HOST Name=gpu File=/var/lib/qc-fake-gpu/nvidia[0-$((FAKE_GPUS - 1))]"
    NODE_GRES=" Gres=gpu:$FAKE_GPUS"
    GRES_TYPES="GresTypes=gpu"
fi
# sched_interval/bf_interval: a requeued job becomes eligible when its hold ends, an event no scheduler pass follows;
# short intervals start it within seconds instead of up to a minute later.
NEW_CONF="$MARK
ClusterName=qclocal
SlurmctldHost=$HOST
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=$CRED_EXPIRE
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
JobRequeue=1
ReturnToService=2
KillWait=$KILL_WAIT
MinJobAge=300
InactiveLimit=0
Waittime=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$GRES_TYPES
NodeName=$HOST NodeAddr=$HOST CPUs=$NODE_CPUS RealMemory=$NODE_MEM_MB$NODE_GRES State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP"
changed=0
if [ "$(cat "$CONF" 2>/dev/null)" != "$NEW_CONF" ]; then
    install -d -m 0755 /etc/slurm
    printf '%s\n' "$NEW_CONF" >"$CONF"
    changed=1
fi
if [ -n "$GRES_LINE" ] && [ "$(cat "$GRES_CONF" 2>/dev/null)" != "$GRES_LINE" ]; then
    printf '%s\n' "$GRES_LINE" >"$GRES_CONF"
    changed=1
elif [ -z "$GRES_LINE" ] && [ -f "$GRES_CONF" ]; then
    rm -f "$GRES_CONF"
    changed=1
fi

# ---------------------------------------------------------------------------------------------- daemons
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
if [ -z "$(pid_of munged /run/munge/munged.pid)" ]; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid --log-file=/var/log/munge/munged.log
    wait_until 20 munged sh -c 'munge -n | unmunge'
    started munged /run/munge/munged.pid
fi

install -d -o slurm -g slurm -m 0755 /var/spool/slurmctld /var/log/slurm
install -d -m 0755 /var/spool/slurmd
if [ "$changed" = 1 ] && [ -n "$(pid_of slurmctld /run/slurmctld.pid)$(pid_of slurmd /run/slurmd.pid)" ]; then
    grep -q "^slurmctld " "$STATE_DIR/started" 2>/dev/null || die "the configuration changed under a running slurmctld this script did not start"
    log "the configuration changed: restarting slurmctld and slurmd"
    stop_one slurmd
    stop_one slurmctld
fi
if [ -z "$(pid_of slurmctld /run/slurmctld.pid)" ]; then
    log "starting slurmctld (CRED_EXPIRE=$CRED_EXPIRE: a requeued job waits $((CRED_EXPIRE + 1)) s)"
    rm -f /run/slurmctld.pid
    slurmctld
    wait_until 60 slurmctld scontrol ping
    started slurmctld /run/slurmctld.pid
fi
if [ -z "$(pid_of slurmd /run/slurmd.pid)" ]; then
    log "starting slurmd"
    rm -f /run/slurmd.pid
    slurmd
    wait_until 30 slurmd test -s /run/slurmd.pid
    started slurmd /run/slurmd.pid
fi

node_ready() { sinfo -h -n "$HOST" -o %t | grep -Eq '^(idle|mix|alloc)$'; }
for ((i = 0; i < 60; i++)); do
    node_ready && break
    if [[ "$(sinfo -h -n "$HOST" -o %t 2>/dev/null)" =~ ^(down|drain|drng|fail) ]]; then
        scontrol update NodeName="$HOST" State=RESUME || true
    fi
    sleep 1
done
node_ready || die "node $HOST is not idle: $(sinfo -N -l); see /var/log/slurm/slurmd.log and slurmctld.log"
timeout 120 srun -N1 -n1 -t 1 true || die "srun true failed on the new cluster"
log "ready: $(sinfo -h -o '%P %D nodes, %c CPUs, %m MB, gres %G')"
