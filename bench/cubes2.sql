-- Cubes for the second cube benchmark (bench/cubes2/, table visits:
-- ts, site_id, country, device, session_id, latency_ms). Every chart
-- filters one site by equality and a day-aligned range, so site_id leads
-- and each cube keeps a time bucket. A session lies on one site, day,
-- country and device, so its events sit in one group of visits_daily:
-- the exact distinct counts cost each session id once.

-- sessions_by_country, device_daily, daily_sessions, mobile_latency,
-- site_country_totals.
CREATE CUBE visits_daily ON visits
  DIMENSIONS (site_id, date_trunc('day', ts) AS day, country, device)
  MEASURES (count(*) AS events, count(DISTINCT session_id) AS sessions,
            sum(latency_ms) AS latency_sum, max(latency_ms) AS latency_max,
            avg(latency_ms) AS latency_avg);

-- hourly_events (events per hour over one day of a site).
CREATE CUBE visits_hourly ON visits
  DIMENSIONS (site_id, date_trunc('hour', ts) AS hour)
  MEASURES (count(*) AS events);
