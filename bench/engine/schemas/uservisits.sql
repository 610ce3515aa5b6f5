-- W2 (and W3 from Parquet): AMPLab Big Data Benchmark Query 2A,
--   SELECT substr(sourceIP, 1, 8), sum(adRevenue) FROM uservisits GROUP BY 1
-- over the uservisits text format: comma separated, no header, Java floats
-- such as 1.1885166E-4. Compressed copies are detected by magic bytes.
CREATE STREAM uservisits (sourceIP TEXT, destURL TEXT, visitDate DATE,
  adRevenue DOUBLE, userAgent TEXT, countryCode TEXT, languageCode TEXT,
  searchWord TEXT, duration INT)
  WITH (format = 'csv', header = false);

CREATE SUMMARY q2a AS
  SELECT substr(sourceIP, 1, 8) AS prefix, sum(adRevenue) AS revenue
  FROM uservisits
  GROUP BY prefix;
