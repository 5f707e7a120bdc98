// report.html's charts and sortable tables. The data is the part of the
// report the charts draw (html.rs, ChartData), read from the page's JSON
// block; every string from a rank
// that goes into a tooltip (HTML) is escaped with echarts.format.encodeHTML,
// and DOM text is set with textContent only.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var series = data.series;
  var simulated = data.gpu_source === 'simulated';
  var esc = echarts.format.encodeHTML;
  var palette = ['#3559c7', '#e07b39', '#2f9e6b', '#c2415d', '#7a55c7', '#8c6d31',
                 '#1b9bb0', '#d4a017', '#5b6475', '#b03a9e', '#4d8f2f', '#a34a28'];
  var charts = [];
  // Charts still drawing, and one more until every chart has started: the
  // page says it is ready (data-charts) when every chart has finished,
  // progressive rendering included.
  var drawing = 1;
  function drawn() {
    drawing -= 1;
    if (drawing === 0) { document.body.setAttribute('data-charts', 'ready'); }
  }

  // Stage colours: the palette, then hues spread by the golden angle.
  function colour(i) {
    return i < palette.length ? palette[i] : 'hsl(' + (i * 137.508) % 360 + ', 55%, 48%)';
  }

  function sum(list, f) { return list.reduce(function (n, x) { return n + f(x); }, 0); }
  function fixed(v, d) { return v === null || v === undefined ? '–' : Number(v).toFixed(d); }

  // Draws a chart into #id, or says there is nothing to draw; the element
  // records how many data points it shows (data-points).
  function draw(id, points, option) {
    var el = document.getElementById(id);
    if (!el) { return; }
    el.setAttribute('data-points', String(points));
    if (!points) {
      el.classList.add('empty');
      el.textContent = el.getAttribute('data-empty');
      return;
    }
    option.animation = false;
    if (simulated && id.indexOf('chart-gpu') === 0) {
      option.title = { text: 'SIMULATED', right: 8, top: 0,
                       textStyle: { color: '#b54708', fontSize: 12, fontWeight: 'bold' } };
    }
    var chart = echarts.init(el);
    drawing += 1;
    var done = false;
    chart.on('finished', function () {
      if (!done) { done = true; drawn(); }
    });
    chart.setOption(option);
    charts.push(chart);
  }
  window.addEventListener('resize', function () {
    charts.forEach(function (c) { c.resize(); });
  });

  // Time per stage and rank: a column per rank, or past 256 ranks per run
  // of consecutive ranks, each cell its slowest rank's, named.
  (function () {
    var totals = series.stage_totals_s;
    var slowest = series.stage_slowest;
    var names = data.heatmap_stages;
    var columnLabels = data.columns.map(function (c) {
      return c.ranks === 1 ? 'rank ' + c.first : 'ranks ' + c.first + '–' + c.last;
    });
    var cells = [];
    var max = 0;
    totals.forEach(function (row, y) {
      row.forEach(function (v, x) {
        if (v !== null) { cells.push([x, y, v]); max = Math.max(max, v); }
      });
    });
    draw('chart-heatmap', cells.length, {
      tooltip: {
        formatter: function (p) {
          var x = p.value[0], y = p.value[1];
          var who = slowest.length ? columnLabels[x] + ', the slowest rank ' + slowest[y][x]
                                   : columnLabels[x];
          return esc(names[y]) + '<br>' + who + ': ' + fixed(p.value[2], 3) + ' s';
        }
      },
      grid: { left: 160, right: 24, top: 8, bottom: 72 },
      xAxis: { type: 'category', data: columnLabels },
      yAxis: { type: 'category', data: names, inverse: true,
               axisLabel: { width: 150, overflow: 'truncate' } },
      visualMap: { min: 0, max: max || 1, precision: 3, calculable: true, orient: 'horizontal',
                   left: 'center', bottom: 0, text: ['s', ''], itemHeight: 160 },
      series: [{ type: 'heatmap', data: cells, progressive: 5000 }]
    });
  })();

  // Each rank's outermost stages on the shared timeline.
  (function () {
    var names = [];
    var index = new Map();
    var bars = [];
    var rows = series.timelines.map(function (t) { return 'rank ' + t.rank; });
    series.timelines.forEach(function (t, row) {
      for (var i = 0; i < t.name.length; i++) {
        var name = t.names[t.name[i]];
        if (!index.has(name)) { index.set(name, names.length); names.push(name); }
        bars.push([row, t.start_s[i], t.end_s[i], index.get(name), t.calls[i]]);
      }
    });
    draw('chart-timeline', bars.length, {
      tooltip: {
        formatter: function (p) {
          var v = p.value;
          return esc(names[v[3]]) + '<br>' + esc(rows[v[0]]) + ': ' + fixed(v[1], 3) + '–' +
            fixed(v[2], 3) + ' s (' + fixed(v[2] - v[1], 3) + ' s)' +
            (v[4] > 1 ? '<br>' + v[4] + ' calls' : '');
        }
      },
      dataZoom: [{ type: 'inside', filterMode: 'weakFilter' },
                 { type: 'slider', filterMode: 'weakFilter', bottom: 8 }],
      grid: { left: 80, right: 24, top: 8, bottom: 56 },
      xAxis: { type: 'value', name: 's', scale: true },
      yAxis: { type: 'category', data: rows, inverse: true },
      series: [{
        type: 'custom',
        encode: { x: [1, 2], y: 0 },
        data: bars,
        renderItem: function (params, api) {
          var y = api.value(0);
          var from = api.coord([api.value(1), y]);
          var to = api.coord([api.value(2), y]);
          var height = api.size([0, 1])[1] * 0.7;
          var shape = echarts.graphic.clipRectByRect(
            { x: from[0], y: from[1] - height / 2, width: Math.max(to[0] - from[0], 1), height: height },
            { x: params.coordSys.x, y: params.coordSys.y,
              width: params.coordSys.width, height: params.coordSys.height });
          return shape && { type: 'rect', shape: shape,
                            style: { fill: colour(api.value(3)) } };
        }
      }]
    });
    var legend = document.createElement('p');
    legend.className = 'hint';
    names.forEach(function (name, i) {
      var swatch = document.createElement('span');
      swatch.textContent = '■ ';
      swatch.style.color = colour(i);
      legend.appendChild(swatch);
      legend.appendChild(document.createTextNode(name + '   '));
    });
    var chart = document.getElementById('chart-timeline');
    if (chart && names.length) { chart.parentNode.insertBefore(legend, chart.nextSibling); }
  })();

  // GPU readings over time: one line per GPU; past MAX_GPU_LINES GPUs, the
  // lowest, mean and highest reading across them per stretch of time, and
  // the GPUs with a bottleneck on their own lines.
  var MAX_GPU_LINES = 16;
  var STRETCHES = 200;
  function gpuLine(g, m) {
    return {
      name: 'rank ' + g.rank + ' GPU ' + g.index, type: 'line', showSymbol: m.t_s.length < 2,
      sampling: 'lttb', data: m.t_s.map(function (t, i) { return [t, m.value[i]]; })
    };
  }
  function spread(gpus, metric) {
    var first = Infinity, last = -Infinity;
    gpus.forEach(function (g) {
      var t = g[metric].t_s;
      first = Math.min(first, t[0]);
      last = Math.max(last, t[t.length - 1]);
    });
    var width = (last - first) / STRETCHES;
    var stretch = function (t) {
      return width > 0 ? Math.min(STRETCHES - 1, Math.floor((t - first) / width)) : 0;
    };
    // Per stretch: the lowest and highest reading, and the mean of the
    // GPUs' own means there (a GPU with many readings in a stretch counts
    // once, like the others).
    var low = [], high = [], total = [], count = [];
    gpus.forEach(function (g) {
      var m = g[metric];
      var sum = [], n = [];
      m.t_s.forEach(function (t, i) {
        var b = stretch(t);
        var v = m.value[i];
        low[b] = low[b] === undefined ? v : Math.min(low[b], v);
        high[b] = high[b] === undefined ? v : Math.max(high[b], v);
        sum[b] = (sum[b] || 0) + v;
        n[b] = (n[b] || 0) + 1;
      });
      n.forEach(function (readings, b) {
        if (readings) {
          total[b] = (total[b] || 0) + sum[b] / readings;
          count[b] = (count[b] || 0) + 1;
        }
      });
    });
    var line = function (name, value, dashed) {
      var data = [];
      for (var b = 0; b < STRETCHES; b++) {
        if (count[b]) { data.push([first + (b + 0.5) * width, value(b)]); }
      }
      return { name: name, type: 'line', showSymbol: data.length < 2, data: data,
               lineStyle: { type: dashed ? 'dashed' : 'solid' } };
    };
    return [
      line('highest of ' + gpus.length + ' GPUs', function (b) { return high[b]; }, true),
      line('mean', function (b) { return total[b] / count[b]; }, false),
      line('lowest', function (b) { return low[b]; }, true)
    ];
  }
  function gpuChart(id, metric, unit) {
    var gpus = series.gpus.filter(function (g) { return g[metric] && g[metric].t_s.length; });
    var lines = gpus.length <= MAX_GPU_LINES
      ? gpus.map(function (g) { return gpuLine(g, g[metric]); })
      : spread(gpus, metric).concat(gpus.filter(function (g) {
          return data.flagged_gpus.indexOf(series.gpus.indexOf(g)) >= 0;
        }).slice(0, MAX_GPU_LINES).map(function (g) { return gpuLine(g, g[metric]); }));
    draw(id, sum(lines, function (l) { return l.data.length; }), {
      tooltip: { trigger: 'axis' },
      legend: { type: 'scroll', bottom: 0 },
      grid: { left: 64, right: 24, top: 24, bottom: 56 },
      xAxis: { type: 'value', name: 's', scale: true },
      yAxis: { type: 'value', name: unit, scale: true },
      dataZoom: [{ type: 'inside' }],
      series: lines
    });
  }
  gpuChart('chart-gpu-util', 'util_pct', '%');
  gpuChart('chart-gpu-memory', 'memory_mb', 'MB');
  gpuChart('chart-gpu-temperature', 'temperature_c', '°C');
  gpuChart('chart-gpu-power', 'power_w', 'W');
  gpuChart('chart-gpu-clock', 'sm_clock_mhz', 'MHz');

  // Diffusion: step time per rank, block throughput per rank.
  (function () {
    var lines = series.steps.map(function (s) {
      return {
        name: 'rank ' + s.rank, type: 'line', showSymbol: false, sampling: 'lttb',
        data: s.step.map(function (step, i) { return [step, s.ms[i]]; })
      };
    });
    draw('chart-steps', sum(lines, function (l) { return l.data.length; }), {
      tooltip: { trigger: 'axis' },
      legend: { type: 'scroll', bottom: 0 },
      grid: { left: 64, right: 24, top: 16, bottom: 56 },
      xAxis: { type: 'value', name: 'step', scale: true },
      yAxis: { type: 'value', name: 'ms', scale: true },
      series: lines
    });
    var fps = data.block_fps;
    draw('chart-fps', fps.length, {
      tooltip: { trigger: 'axis' },
      grid: { left: 64, right: 24, top: 16, bottom: 32 },
      xAxis: { type: 'category', data: fps.map(function (v) { return 'rank ' + v.rank; }) },
      yAxis: { type: 'value', name: 'frames/s' },
      series: [{ type: 'bar', name: 'frames/s', data: fps.map(function (v) { return v.value; }),
                 itemStyle: { color: palette[0] } }]
    });
  })();

  // The time account: a stacked bar for the job and each rank, every
  // second in one category (percent of its wall time); past the ranks
  // drawn one by one, each category's least, median and most rank.
  (function () {
    var account = data.account;
    var names = account.categories;
    var colours = ['#9aa5b8', '#d4a017', '#b03a9e', '#c2415d', '#2f9e6b', '#3559c7',
                   '#e07b39', '#5b6475', '#8c6d31'];
    if (account.spread.length) {
      var spread = account.spread;
      draw('chart-account', spread.length, {
        tooltip: { trigger: 'axis', valueFormatter: function (v) { return fixed(v, 3) + ' s'; } },
        legend: { bottom: 0 },
        grid: { left: 150, right: 24, top: 8, bottom: 56 },
        yAxis: { type: 'category', inverse: true,
                 data: spread.map(function (s) { return names[['setup', 'warmup', 'profiler',
                   'stall', 'work', 'collective_transfer', 'collective_wait', 'untracked',
                   'teardown'].indexOf(s.category)]; }) },
        xAxis: { type: 'value', name: 's' },
        series: ['min_s', 'p50_s', 'max_s'].map(function (field, i) {
          return { name: ['least rank', 'median rank', 'most rank'][i], type: 'bar',
                   itemStyle: { color: palette[i] },
                   data: spread.map(function (s) { return s[field]; }) };
        })
      });
      return;
    }
    var bars = account.bars;
    var pct = function (bar, k) {
      var total = sum(bar[1], function (v) { return v || 0; });
      var v = bar[1][k];
      return v === null || !total ? null : v / total * 100;
    };
    draw('chart-account', bars.length, {
      tooltip: { trigger: 'axis', valueFormatter: function (v) { return fixed(v, 1) + ' %'; } },
      legend: { bottom: 0 },
      grid: { left: 72, right: 24, top: 8, bottom: 56 },
      yAxis: { type: 'category', inverse: true, data: bars.map(function (b) { return b[0]; }) },
      xAxis: { type: 'value', name: '% of wall', max: 100 },
      series: names.map(function (name, k) {
        return { name: name, type: 'bar', stack: 'time', itemStyle: { color: colours[k] },
                 data: bars.map(function (b) { return pct(b, k); }) };
      })
    });
  })();

  // GPU time per rank from kernel traces: idle, compute and non-compute
  // shares of each GPU's window, stacked.
  (function () {
    var rows = data.gpu_time;
    var label = function (g) { return 'rank ' + g.rank + (g.gpu === null ? '' : ' GPU ' + g.gpu); };
    var bar = function (name, field, colour) {
      return { name: name, type: 'bar', stack: 'time', itemStyle: { color: colour },
               data: rows.map(function (g) { return g[field]; }) };
    };
    draw('chart-gpu-time', rows.length, {
      tooltip: { trigger: 'axis', valueFormatter: function (v) { return fixed(v, 1) + ' %'; } },
      legend: { bottom: 0 },
      grid: { left: 64, right: 24, top: 32, bottom: 56 },
      xAxis: { type: 'category', data: rows.map(label) },
      yAxis: { type: 'value', name: '% of window', max: 100 },
      series: [bar('compute', 'compute_pct', palette[2]), bar('non-compute', 'non_compute_pct', palette[1]),
               bar('idle', 'idle_pct', palette[8])]
    });
  })();

  // Sortable tables: a click on a head sorts by that column (numbers by
  // their data-sort value, missing ones last), a second click reverses.
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function (table) {
    var heads = table.querySelectorAll('th');
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener('click', function () {
        var numeric = th.getAttribute('data-numeric') === 'true';
        var ascending = !th.classList.contains('sorted-asc');
        Array.prototype.forEach.call(heads, function (h) {
          h.classList.remove('sorted-asc', 'sorted-desc');
        });
        th.classList.add(ascending ? 'sorted-asc' : 'sorted-desc');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var key = function (row) {
          var cell = row.cells[col];
          if (!numeric) { return cell.textContent; }
          var v = parseFloat(cell.getAttribute('data-sort'));
          return isNaN(v) ? null : v;
        };
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (x === null || y === null) { return (x === null) - (y === null); }
          var d = numeric ? x - y : x.localeCompare(y);
          return ascending ? d : -d;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  drawn();
})();
