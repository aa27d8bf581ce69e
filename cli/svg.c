/* svg.c -- `sluice demo --svg FILE`: the demo as a picture.
 *
 * One lane per algorithm (and one for the requests offered), sharing a time
 * axis.  Each lane draws, at every instant s, how many requests went through
 * in the second before it -- in (s - W, s], the quantity the limit bounds --
 * with the limit as a dashed line; what rises above it is filled red.  So a
 * fixed window's boundary burst is a red plateau at twice the line, and an
 * algorithm that holds the limit never crosses it.  A rug under each lane
 * marks the requests themselves, one tick per pixel column that has any.
 *
 * The curve is exact at pixel resolution: for each column [a, b) of the
 * plot the value drawn is the largest count at a or at any request time in
 * the column (the count only rises at a request time), found by binary
 * search in the sorted times, so a spike narrower than a pixel is not lost.
 *
 * Hand-written SVG 1.1, no script, no external font or file: a few kB per
 * lane, valid XML (tests/cli/svg.sh checks it with xmllint).  Text is escaped.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Layout, in px. */
#define SVG_W 960
#define LABEL_W 230 /* spec names on the left */
#define PLOT_X (LABEL_W + 10)
#define PLOT_W 600
#define RIGHT_X (PLOT_X + PLOT_W + 12)
#define TOP 104
#define LANE_H 64  /* the curve's height */
#define RUG_H 7
#define LANE_GAP 20
#define LANE_STEP (LANE_H + RUG_H + LANE_GAP)

/* The number of times in t[0..n) that are <= x (t sorted). */
static size_t count_le(const uint64_t *t, size_t n, uint64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Requests in (s - w, s]. */
static size_t in_window(const uint64_t *t, size_t n, uint64_t s, uint64_t w)
{
    size_t hi = count_le(t, n, s);
    return s >= w ? hi - count_le(t, n, s - w) : hi;
}

/* The largest in_window over [a, b): at a, and at each time in [a, b). */
static size_t max_in(const uint64_t *t, size_t n, uint64_t a, uint64_t b, uint64_t w)
{
    size_t best = in_window(t, n, a, w);
    for (size_t i = count_le(t, n, a); i < n && t[i] < b; i++) {
        size_t c = in_window(t, n, t[i], w);
        if (c > best) best = c;
    }
    return best;
}

static void put_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static const char *over_color(bool over) { return over ? "#b52d1a" : "#555"; }

static double x_of(const sluice_cli_svg *s, uint64_t t)
{
    return PLOT_X + (double)PLOT_W * (double)t / (double)s->t_end_ns;
}

/* One lane at y0 (top of the curve area): the area of the counts, red
 * above the limit, the limit line, the rug and the labels. */
static void lane(FILE *f, const sluice_cli_svg *s, const sluice_cli_lane *l, size_t idx,
                 double y0, size_t ymax, bool offered)
{
    const double base = y0 + LANE_H;
    const double ylim = base - (double)LANE_H * (double)s->limit / (double)ymax;
    size_t peak = 0;

    /* The curve: a step path over the pixel columns, then closed down to
     * the base line. */
    fprintf(f, "<clipPath id=\"over%zu\"><rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\"/></clipPath>\n",
            idx, PLOT_X, y0 - 2, PLOT_W, ylim - y0 + 2);
    fprintf(f, "<path id=\"area%zu\" d=\"M%d %.1f", idx, PLOT_X, base);
    double last = base;
    for (int px = 0; px < PLOT_W; px++) {
        uint64_t a = s->t_end_ns * (uint64_t)px / PLOT_W;
        uint64_t b = s->t_end_ns * (uint64_t)(px + 1) / PLOT_W;
        size_t c = max_in(l->t, l->n, a, b, s->window_ns);
        if (c > peak) peak = c;
        double y = base - (double)LANE_H * (double)c / (double)ymax;
        if (y != last) {
            fprintf(f, "H%dV%.1f", PLOT_X + px, y);
            last = y;
        }
    }
    fprintf(f, "H%d", PLOT_X + PLOT_W);
    fprintf(f, "V%.1fZ\"/>\n", base);
    fprintf(f, "<use href=\"#area%zu\" xlink:href=\"#area%zu\" fill=\"%s\"/>\n", idx, idx,
            offered ? "#c9ced6" : "#5b8cc9");
    if (!offered)
        fprintf(f, "<use href=\"#area%zu\" xlink:href=\"#area%zu\" fill=\"#d9412b\" clip-path=\"url(#over%zu)\"/>\n",
                idx, idx, idx);

    /* axes of the lane: base line and the limit */
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#444\" stroke-width=\"1\"/>\n",
            PLOT_X, base + 0.5, PLOT_X + PLOT_W, base + 0.5);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#111\" stroke-width=\"1.2\" stroke-dasharray=\"5 3\"/>\n",
            PLOT_X, ylim, PLOT_X + PLOT_W, ylim);

    /* the rug: the pixel columns holding a request, as runs */
    fprintf(f, "<path fill=\"%s\" d=\"", offered ? "#888" : "#2d5f9a");
    int run = -1;
    for (int px = 0; px <= PLOT_W; px++) {
        bool any = false;
        if (px < PLOT_W) {
            uint64_t a = s->t_end_ns * (uint64_t)px / PLOT_W;
            uint64_t b = s->t_end_ns * (uint64_t)(px + 1) / PLOT_W;
            any = count_le(l->t, l->n, b - 1) > (a ? count_le(l->t, l->n, a - 1) : 0);
        }
        if (any && run < 0) run = px;
        if (!any && run >= 0) {
            fprintf(f, "M%d %.1fh%dv%dh%dZ", PLOT_X + run, base + 2, px - run, RUG_H - 1, run - px);
            run = -1;
        }
    }
    fputs("\"/>\n", f);

    /* labels: the spec on the left, what went through on the right */
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"14\" font-weight=\"%s\">",
            LABEL_W, y0 + LANE_H / 2.0 + 1, offered ? "normal" : "bold");
    put_text(f, l->label);
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11.5\" fill=\"#555\">%zu %s</text>\n",
            LABEL_W, y0 + LANE_H / 2.0 + 17, l->n, offered ? "requests" : "admitted");
    bool over = !offered && peak > s->limit;
    if (l->note) { /* a line about the lane, at its top, clear of the curve */
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11.5\" fill=\"%s\">",
                x_of(s, s->note_at_ns), y0 + 10, over_color(!offered && peak > s->limit));
        put_text(f, l->note);
        fputs("</text>\n", f);
    }
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\" fill=\"%s\">%zu</text>\n",
            RIGHT_X, y0 + LANE_H / 2.0 - 2, over ? "#c0331f" : "#333", peak);
    char note[48];
    if (offered)
        snprintf(note, sizeof note, "at most");
    else if (over)
        snprintf(note, sizeof note, "%.2f\u00d7 the limit", (double)peak / (double)s->limit);
    else
        snprintf(note, sizeof note, "within");
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">%s</text>\n", RIGHT_X,
            y0 + LANE_H / 2.0 + 12, over ? "#c0331f" : "#666", note);
}

int sluice_cli_svg_write(const sluice_cli_svg *s, FILE *f, const char *path)
{
    /* the vertical scale: the largest count of any lane, in steps of 50 */
    size_t ymax = (size_t)s->limit;
    const size_t total = s->nlanes + 1;
    for (size_t i = 0; i < total; i++) {
        const sluice_cli_lane *l = i == 0 ? s->offered : &s->lanes[i - 1];
        size_t c = max_in(l->t, l->n, 0, s->t_end_ns, s->window_ns);
        if (c > ymax) ymax = c;
    }
    ymax = (ymax + 49) / 50 * 50;
    const double ay = TOP + (double)total * LANE_STEP - LANE_GAP + 4; /* time axis */
    const int height = (int)ay + 30;

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" "
               "version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\">\n",
            SVG_W, height, SVG_W, height);
    fputs("<title>", f);
    put_text(f, s->title);
    fputs("</title>\n", f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", SVG_W, height);
    fputs("<text x=\"14\" y=\"28\" font-size=\"18\" font-weight=\"bold\">", f);
    put_text(f, s->title);
    fputs("</text>\n<text x=\"14\" y=\"50\" font-size=\"12.5\" fill=\"#333\">", f);
    put_text(f, s->subtitle);
    fputs("</text>\n<text x=\"14\" y=\"69\" font-size=\"12.5\" fill=\"#333\">", f);
    put_text(f, s->legend);
    fputs("</text>\n", f);

    /* behind the lanes: a grid line every second, and the highlighted span */
    const unsigned secs = (unsigned)(s->t_end_ns / 1000000000ULL);
    for (unsigned k = 0; k <= secs; k++) {
        double x = x_of(s, (uint64_t)k * 1000000000ULL);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\" stroke-width=\"1\"/>\n",
                x, TOP - 6, x, ay);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">%u s</text>\n",
                x, ay + 16, k);
    }
    if (s->mark_to_ns > s->mark_from_ns) {
        double x1 = x_of(s, s->mark_from_ns), x2 = x_of(s, s->mark_to_ns);
        if (x2 - x1 < 3) x2 = x1 + 3;
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"#f2b233\" opacity=\"0.6\"/>\n",
                x1, TOP - 6, x2 - x1, ay - TOP + 6);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" font-weight=\"bold\" fill=\"#9a6400\" text-anchor=\"middle\">",
                (x1 + x2) / 2, TOP - 12);
        put_text(f, s->mark_label);
        fputs("</text>\n", f);
    }

    for (size_t i = 0; i < total; i++) {
        const sluice_cli_lane *l = i == 0 ? s->offered : &s->lanes[i - 1];
        lane(f, s, l, i, TOP + (double)i * LANE_STEP, ymax, i == 0);
    }
    fputs("</svg>\n", f);

    if (fflush(f) != 0 || ferror(f)) {
        fprintf(stderr, "sluice demo: cannot write \"%s\"\n", path);
        return 1;
    }
    return 0;
}
