# npm-pins.sh: sourced by the install-*.sh scripts that install pinned npm packages into a
# directory outside the repo. Defines npm_install_pins; runs nothing itself.

# npm_install_pins DIR NAME [NPM-FLAG…] PIN…
# Makes DIR (an existing absolute directory) an npm project named NAME, then installs each PIN
# (`package@version`) whose installed version is not already that version, with the npm flags
# given (words starting with `-`). Only the npm registry is used; npm's chatter goes to stderr.
npm_install_pins() {
  local dir=$1 name=$2
  shift 2
  local flags=() want=() p have
  [ -f "$dir/package.json" ] || echo "{\"name\":\"$name\",\"private\":true}" > "$dir/package.json"
  for p in "$@"; do
    case $p in
      -*) flags+=("$p"); continue ;;
    esac
    have=$(node -e 'try{process.stdout.write(require(process.argv[1]).version||"")}catch(e){}' \
      "$dir/node_modules/${p%@*}/package.json" 2>/dev/null || true)
    [ "$have" = "${p##*@}" ] || want+=("$p")
  done
  if [ ${#want[@]} -gt 0 ]; then
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "${flags[@]}" "${want[@]}" >&2)
  fi
}
