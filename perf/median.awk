# median(list): the median of the numbers in the space-separated string `list` (the upper
# one of an even count). Shared by the perf scripts' summaries: awk -f perf/median.awk -f ...
function median(list,   a, n, i, j, t) {
  n = split(list, a, " ")
  for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return a[int((n + 1) / 2)]
}
