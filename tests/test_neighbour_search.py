"""The neighbour search of cuda/jaxwarp_team.h as plain C++ (g++, as the
XLA:CPU build compiles it): the grid search against the scan over all
agents, including a finite radius, which both treat as strict (d2 < r2).
The GPU runs the same source (tests/test_tag_continuous_gpu.py)."""

from __future__ import annotations

import subprocess

import pytest

from jaxwarp import authoring
from jaxwarp.authoring import build

HARNESS = r"""
#include <stdio.h>
#include <vector>
#include "jaxwarp_team.h"
using namespace jaxwarp;

static uint32_t state = 12345u;
static float rnd() { state = state * 1664525u + 1013904223u; return (state >> 8) * (1.0f / 16777216.0f); }

int main() {
  int bad = 0, cases = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 20 + (trial * 37) % 400;
    const float length = trial % 3 == 0 ? 8.0f : 100.0f;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      if (trial % 2) {  // a lattice on cell edges: many exact ties
        const int g = grid_side(n);
        x[i] = length / g * (float)(i % (g + 1));
        y[i] = length / g * (float)((i / (g + 1)) % (g + 1));
      } else {
        x[i] = rnd() * length;
        y[i] = rnd() * length;
      }
    }
    auto member = [&](int j) { return (j * 7 + trial) % 5 != 0; };
    std::vector<int32_t> words(grid_side(n) * grid_side(n) + 2 + 5 * n);
    const auto grid = NeighbourGrid::carve(words.data(), n, grid_side(n), 0.0f, length);
    Team team{n, 0, 1, true, nullptr};
    grid.build(team, x.data(), y.data(), member);
    const int k = 1 + trial % 12;
    for (int i = 0; i < n; ++i) {
      // A radius equal to some pair's squared distance: ties with the radius.
      const int o = (i + 1 + trial) % n;
      const float r2s[2] = {INFINITY, detail::sq_dist(x[i], y[i], x[o], y[o])};
      for (float r2 : r2s) {
        int32_t a[16], b[16];
        k_nearest(&grid, n, x.data(), y.data(), member, i, x[i], y[i], r2, k, a);
        k_nearest((const NeighbourGrid*)nullptr, n, x.data(), y.data(), member, i, x[i], y[i],
                  r2, k, b);
        ++cases;
        for (int m = 0; m < k; ++m) {
          if (a[m] != b[m]) { ++bad; break; }
          if (a[m] >= 0 && !(detail::sq_dist(x[i], y[i], x[a[m]], y[a[m]]) < r2)) { ++bad; break; }
        }
      }
    }
  }
  printf("%d %d\n", cases, bad);
  return 0;
}
"""


def test_grid_search_equals_scan_with_and_without_radius(tmp_path):
    try:
        cxx = build.find_cxx()
    except Exception as exc:  # pragma: no cover - CI has g++
        pytest.skip(f"no C++ compiler: {exc}")
    src = tmp_path / "harness.cc"
    src.write_text(HARNESS)
    exe = tmp_path / "harness"
    subprocess.run([cxx, *authoring.CXX_FLAGS, "-I", str(authoring.API_DIR), str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    cases, bad = int(out[0]), int(out[1])
    assert cases > 10_000
    assert bad == 0, f"{bad} of {cases} queries differ between the grid search and the scan"


def test_grid_side_is_the_same_in_cpp_and_python(tmp_path):
    """Python sizes the grid's scratch with authoring.grid_side; the kernels
    carve it with jaxwarp::grid_side: the two must agree for every n (a C++
    grid with more cells would overrun the scratch)."""
    try:
        cxx = build.find_cxx()
    except Exception as exc:  # pragma: no cover - CI has g++
        pytest.skip(f"no C++ compiler: {exc}")
    src = tmp_path / "sides.cc"
    src.write_text('#include <stdio.h>\n#include "jaxwarp_team.h"\n'
                   "int main() { for (int n = 0; n <= 20000; ++n) "
                   'printf("%d\\n", jaxwarp::grid_side(n)); return 0; }\n')
    exe = tmp_path / "sides"
    subprocess.run([cxx, *authoring.CXX_FLAGS, "-I", str(authoring.API_DIR), str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    cpp = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True,
                                          text=True).stdout.split()]
    assert cpp == [authoring.grid_side(n) for n in range(20001)]
    assert authoring.grid_side(1000) == 16 and authoring.grid_side(10000) == 50
