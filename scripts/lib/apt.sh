# Sourced by the set-up scripts: installs the Debian packages that are missing, quietly, and does
# nothing when all are present.
#   apt_install_missing LABEL PACKAGE...
# A package of another architecture (name:arch, e.g. libgtest-dev:arm64) first adds that
# architecture to dpkg. Runs apt-get through sudo when not root.
apt_install_missing() {
  local label=$1 p arch sudo=""
  shift
  local missing=()
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  (( ${#missing[@]} )) || return 0
  echo "$label: installing ${missing[*]}"
  if [[ "$(id -u)" != 0 ]]; then sudo=sudo; fi
  for p in "${missing[@]}"; do
    if [[ "$p" == *:* ]]; then
      arch=${p##*:}
      if ! dpkg --print-architecture | grep -qx "$arch" &&
         ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
        $sudo dpkg --add-architecture "$arch"
      fi
    fi
  done
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}
