-- W1 (and W3 from Parquet): the three summaries of an AK-style impressions
-- stream, as a user of cardinal would declare them. bench/engine/harness.py
-- runs the same three as DuckDB and chDB SQL and compares the answers.
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');

-- Reach by state by day (the issue's example).
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS events, sum(revenue) AS revenue, hll(user_id) AS users
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;

-- Audience and revenue distribution of each inventory provider's
-- impressions by day.
CREATE SUMMARY providers AS
  SELECT date_trunc('day', ts) AS day, provider,
         count(*) AS events, hll(user_id) AS users,
         approx_quantile(revenue, 0.5) AS revenue_p50,
         approx_quantile(revenue, 0.9) AS revenue_p90,
         approx_quantile(revenue, 0.99) AS revenue_p99
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, provider;

-- The ten most served sites of each day.
CREATE SUMMARY top_sites AS
  SELECT date_trunc('day', ts) AS day, count(*) AS events, topk(site, 10) AS sites
  FROM impressions WHERE kind = 'impression'
  GROUP BY day;
