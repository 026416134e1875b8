# bash completion for fdoctl (installed as
# <prefix>/share/bash-completion/completions/fdoctl). CLI11 has no completion
# generator, so this lists fdoctl's commands and options by hand;
# tests/packaging/completion_test.sh checks it against `fdoctl --help`.
_fdoctl() {
  local cur prev cmd sub i w
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  local globals="--socket --state-dir --store --offline --json --timeout --help --version"
  local commands="run programs program profiles profile backup restore gc cache explain status doctor metrics config web"
  case $prev in
    --socket|--state-dir|--store|--fdod)
      mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
    --timeout|--stages|-n|--arg|-a|--buffer|-b|--name|--entry|-e|-v|--threshold|-t|--limit|-l|--wait-timeout|--max-age|--listen)
      return ;;
    --format|-f)
      mapfile -t COMPREPLY < <(compgen -W "json profdata" -- "$cur"); return ;;
    --output|-o)
      mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
    --chartjs-dir)
      mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
  esac
  cmd="" sub=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    case $w in
      --socket|--state-dir|--store|--timeout) ((i++)) ;;
      -*) ;;
      *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
    esac
  done
  local words
  case $cmd in
    "") words="$commands $globals" ;;
    run) words="--entry --arg --buffer --stages --name --show-buffers --wait-optimized --wait-timeout $globals"
         [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; } ;;
    profile)
      case $sub in
        "") words="show history diff pin unpin reset delete export import annotate" ;;
        show) words="--version --counts $globals" ;;
        diff) words="--threshold --all $globals" ;;
        annotate) words="--function --trust-ir $globals" ;;
        export) words="--all --format --output $globals" ;;
        import)
          [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }
          words="--program $globals" ;;
        *) words="$globals" ;;
      esac ;;
    program) [[ -z $sub ]] && words="delete" || words="$globals" ;;
    cache) [[ -z $sub ]] && words="stats" || words="$globals" ;;
    gc) words="--dry-run --max-age $globals" ;;
    backup|restore) [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }
             words="$globals" ;;
    explain) [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return; }
             words="--limit $globals" ;;
    web) words="--listen --allow-remote --chartjs-dir $globals" ;;
    doctor) words="--self-test --fdod --stages $globals" ;;
    *) words="$globals" ;;
  esac
  mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}
complete -F _fdoctl fdoctl
