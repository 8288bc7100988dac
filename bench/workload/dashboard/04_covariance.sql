-- Does time on page move with spend? Sample covariance and Pearson
-- correlation of amount vs dwell_ms per arm, purchases only.
SELECT arm,
       count(*) AS purchases,
       covar_samp(amount, CAST(dwell_ms AS DOUBLE PRECISION)) AS covar_amount_dwell,
       corr(amount, CAST(dwell_ms AS DOUBLE PRECISION)) AS corr_amount_dwell
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
  AND action = 'purchase'
GROUP BY arm
ORDER BY arm
